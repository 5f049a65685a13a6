"""Engine integrations: the dsdr objectives on existing distributed RL engines."""
