"""dsdr_eval: evaluation and analysis harness for reasoning LLMs."""

__version__ = "0.1.0"
