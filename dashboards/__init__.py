"""The dsdr Streamlit dashboard (`dsdr-dashboard`): training dynamics, evaluation, samples."""
