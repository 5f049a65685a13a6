"""The dsdr objectives on TRL's GRPOTrainer (``dsdr-train --engine trl``): accelerate with DeepSpeed
ZeRO-2/3 or FSDP, vLLM rollouts (colocate / server), multi-node. See :mod:`.run` (the run),
:mod:`.trainer` (the GRPOTrainer subclass), :mod:`.batch` (whole-batch scoring, mini-batches),
:mod:`.loss` (Eq. 14 from core_algos) and :mod:`.mapping` (TrainConfig -> GRPOConfig). Importing
this package imports nothing heavy; TRL is imported by those modules."""
