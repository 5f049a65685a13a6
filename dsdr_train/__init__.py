"""dsdr_train: a compact GRPO / DAPO / DSDR / DARLING trainer.

The objective (advantages, reward shaping, coupling weights, the local entropy term, the clipped
surrogate and loss aggregation) lives in :mod:`dsdr_train.core_algos` as pure torch functions.
Nothing heavy is imported here so that ``dsdr-train --help`` stays fast.
"""
