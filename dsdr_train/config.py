"""The trainer configuration: one frozen dataclass, every field documented.

Precedence (lowest to highest): dataclass defaults < the algorithm's objective defaults
(``objective.ALGO_DEFAULTS``, docs/ALGORITHMS.md §1-§4) < a YAML file (``--config``) < CLI flags
(``--algo/--model/--train-data/--out``) < ``key=value`` overrides.

The objective settings are one nested :class:`~dsdr_train.objective.ObjectiveConfig`
(``cfg.objective``), defined once there. Users keep writing them as flat keys (``tau: 2`` in a
YAML file, ``tau=2`` on the command line; a nested ``objective:`` mapping is accepted too); an
objective key left unset (or ``null``) takes the algorithm's default, which ``resolve_config``
fills in, so the recorded config.json always states the value actually used. ``cfg.to_dict()``
(the ``config`` of a run's config.json) stays one flat mapping, as before the nesting. In code
the objective settings are read and replaced through the section only (``cfg.objective.tau``,
``dataclasses.replace(cfg, objective=dataclasses.replace(cfg.objective, tau=2))``), so a type
checker sees every attribute; ``cfg.replace(tau=2)`` routes flat keys as the YAML does.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_train.objective import ALGO_DEFAULTS, ObjectiveConfig, objective_config

ALGOS = tuple(ALGO_DEFAULTS)
# Flat config keys of the nested ObjectiveConfig (``algo`` included); derived, never listed again.
OBJECTIVE_KEYS = tuple(f.name for f in dataclasses.fields(ObjectiveConfig))


def _f(default: Any, help: str, **choices: Any) -> Any:
    metadata = {"help": help}
    if "choices" in choices:
        metadata["choices"] = tuple(choices["choices"])
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class TrainConfig:
    # --- run -----------------------------------------------------------------------------
    model: str = _f("", "policy to train: HF dir, hub id or alias (smollm2-135m)")
    train_data: str = _f("", "training problems: a JSONL file (problem/answer) or a hub dataset id")
    out: str = _f("", "run directory (config.json, metrics.jsonl, checkpoints/, final/)")
    seed: int = _f(0, "global seed (prompt order, sampling, init of everything random)")
    device: str = _f("auto", "cpu | cuda | auto (cuda when available); each DDP rank uses its local GPU")
    dtype: str = _f("auto", "float32 | bfloat16 | auto (bf16 on GPU, fp32 on CPU)",
                    choices=("auto", "float32", "bfloat16", "float16"))
    total_steps: int = _f(100, "number of optimizer steps (rollout batches) to train")
    engine: str = _f("compact", "training engine: compact (this package's reference loop, torchrun DDP) | trl (TRL's "
                     "GRPOTrainer under accelerate: DeepSpeed ZeRO-2/3, FSDP, multi-node; same objectives)",
                     choices=("compact", "trl"))
    time_limit_s: float | None = _f(None, "stop after the first step that ends past this many seconds of this process's training (final/ is still written)")
    # --- data ------------------------------------------------------------------------------
    dataset_config: str | None = _f(None, "hub dataset config name (e.g. 'all' for open-r1/DAPO-Math-17K-Processed)")
    dataset_split: str = _f("train", "hub dataset split")
    problem_field: str | None = _f(None, "field holding the problem text (auto: problem | prompt | question)")
    answer_field: str | None = _f(None, "field holding the gold answer (auto: answer | solution | ground_truth)")
    max_train_examples: int | None = _f(None, "use only the first N training problems (None = all)")
    template: str | None = _f(None, "prompt template: dsdr_eval.prompts name or file (None = qwen-boxed, the eval default)")
    prompt_mode: str = _f("auto", "auto (chat template when the tokenizer has one) | chat | raw", choices=("auto", "chat", "raw"))
    max_prompt_length: int = _f(1024, "prompts longer than this many tokens are skipped (counted in the log)")
    # --- rollout ---------------------------------------------------------------------------
    rollout_engine: str = _f("auto", "auto (vllm when importable and, on CPU, when the run generates enough to pay "
                             "for the engine start; choice + reason in config.json) | hf (transformers generate) | "
                             "vllm (in-process engine, weights synced after each update)", choices=("auto", "hf", "vllm"))
    group_size: int = _f(8, "G: rollouts per prompt (§3.5: 8)")
    prompts_per_step: int = _f(256, "prompts per rollout batch (§3.5: 256); split evenly over DDP ranks")
    mini_batch_prompts: int = _f(16, "prompts per PPO mini-batch = per optimizer update (§3.5: 16)")
    micro_batch_size: int | None = _f(None, "rollouts per forward/backward pass (gradient accumulation unit); None = "
                                      "8 on the compact engine, and on engine trl the largest divisor <= 8 of a "
                                      "mini-batch's rollouts per process (recorded in config.json engine_layout)")
    ppo_epochs: int = _f(1, "passes over each rollout batch")
    temperature: float = _f(1.0, "rollout sampling temperature (§3.5: 1.0); logits are divided by it in the loss too")
    top_p: float = _f(1.0, "rollout nucleus sampling")
    max_response_length: int = _f(4096, "max new tokens per rollout (§3.5: 4096 / 8192)")
    stop: tuple[str, ...] = _f((), "stop strings (a YAML list): a rollout ends before the first one, which is not in its "
                               "text (its tokens up to the one completing it are the response), as `dsdr-eval run --stop`; "
                               "compact engine (hf and vllm rollouts) and engine trl with vLLM rollouts")
    generation_batch_size: int = _f(64, "rollouts per transformers.generate call (hf engine)")
    check_on_policy: bool = _f(False, "hf engine: keep the sampler's log-probs of every token and log "
                               "rollout/ratio_dev_max = max |pi_old/q - 1| (costs the scores of every step)")
    vllm_gpu_memory_utilization: float = _f(0.4, "vllm engine: fraction of GPU memory for weights + KV cache")
    vllm_mode: str = _f("colocate", "engine=trl with rollout_engine=vllm: colocate (vLLM in each training process) | "
                        "server (a separate `trl vllm-serve`)", choices=("colocate", "server"))
    vllm_server_base_url: str | None = _f(None, "engine=trl, vllm_mode=server: the `trl vllm-serve` URL "
                                          "(None = TRL's default host/port)")
    # --- optimisation ----------------------------------------------------------------------
    lr: float = _f(1e-6, "AdamW learning rate (§3.5: 1e-6)")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    adam_beta1: float = _f(0.9, "AdamW beta1")
    adam_beta2: float = _f(0.999, "AdamW beta2")
    warmup_steps: int = _f(0, "linear LR warmup in optimizer updates, then constant")
    max_grad_norm: float = _f(1.0, "gradient clipping by global norm (0 = off)")
    gradient_checkpointing: bool = _f(False, "trade compute for memory in the policy forward")
    disable_dropout: bool = _f(True, "zero the policy's dropout probabilities at load, so the update scores the "
                               "distribution the rollouts were sampled from (ratio 1 before the first update); "
                               "old / reference log-probs always run in eval mode")
    # --- objective (flat keys std_mode, tau, ... fill ObjectiveConfig; None = the algorithm's default) ----
    objective: ObjectiveConfig = field(default_factory=lambda: objective_config("grpo"), metadata={
        "help": "the objective settings (dsdr_train.objective.ObjectiveConfig), set by their own flat keys below"})
    loss_norm_constant: int | None = _f(None, "C of seq-mean-token-sum-norm (Dr.GRPO: loss = token sum / C); "
                                        "None = max_response_length (verl's loss_scale_factor); unused by other modes")
    # --- diversity -------------------------------------------------------------------------
    encoder: str | None = _f(None, "sentence encoder for D_emb (None = all-MiniLM-L6-v2, offline)")
    encoder_chunked: bool = _f(False, "embed a long rollout as the mean of its chunk embeddings instead of the "
                               "encoder's truncation (§3.1 option; dsdr-eval diversity --chunked)")
    encoder_max_seq_length: int | None = _f(None, "encoder truncation / chunk window in word pieces "
                                            "(None = the encoder's own: 256 for all-MiniLM-L6-v2)")
    formula_rules: str = _f("extended", "formula extraction for D_eq (§3.1; the paper is silent): extended = DIVER's "
                            "\\[..\\], \\(..\\), $$..$$, $..$ plus equation-like \\begin{ENV} (default) | diver = "
                            "the four delimiters only", choices=("extended", "diver"))
    solution_cut: str = _f("answer-end", "what the diversity terms (D_emb, D_eq, DARLING's partition) read of a rollout: "
                           "answer-end = its text up to the end of its graded final answer, so text after the answer "
                           "earns no bonus (issue 42, default) | none = the whole text",
                           choices=("answer-end", "none"))
    darling_partition: str = _f("embedding", "DARLING partition (dsdr_eval.diversity_metrics.partition_methods.make_equivalence spec): embedding "
                                "(cosine >= darling_threshold) | answer-formula | classifier:PATH | judge")
    darling_threshold: float | None = _f(None, "DARLING threshold (embedding cosine / classifier probability; None = dsdr_eval default 0.9 / 0.5)")
    # --- grading ---------------------------------------------------------------------------
    grading_timeout_s: float = _f(5.0, "grading timeout per distinct answer, in the grading worker's CPU time "
                                       "(timeout counts as incorrect); dsdr-eval's grading_timeout_s")
    grade_workers: int | None = _f(None, "grading worker processes (None = dsdr_eval default)")
    # --- validation ------------------------------------------------------------------------
    val_data: str | None = _f(None, "validation problems: benchmark name or JSONL path (None = no validation)")
    val_every: int = _f(0, "validate every N steps and at the end (0 = only at the end when val_data is set)")
    val_max_problems: int | None = _f(64, "validate on the first N problems")
    val_n: int = _f(4, "samples per problem at val_temperature for val/avg@{val_n}")
    val_temperature: float = _f(0.7, "temperature of the val/avg@k samples (§5: 0.7)")
    val_top_p: float = _f(0.9, "top-p of validation sampling (§5: 0.9)")
    val_pass1_temperature: float = _f(0.1, "temperature of the single val/pass@1 rollout (§5: 0.1)")
    val_max_tokens: int | None = _f(None, "max new tokens in validation (None = max_response_length)")
    # --- checkpoints / logging -------------------------------------------------------------
    save_final: bool = _f(True, "write RUN_DIR/final/ (HF dir) at the end of training")
    save_every: int = _f(50, "write checkpoints/step_XXXXXX every N steps (0 = only final/)")
    keep_last: int = _f(2, "keep only the newest N step checkpoints (0 = keep all)")
    tensorboard: bool = _f(False, "also write TensorBoard events to RUN_DIR/tensorboard")
    report_to: str = _f("none", "engine=trl: TRL/transformers reporting backends, comma-separated "
                        "(tensorboard, wandb, trackio, ...; none = metrics.jsonl only)")
    log_diversity: bool = _f(True, "compute DSDR diversity for logging even when the objective does not use it")
    progress: bool = _f(True, "show progress bars")

    # ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """One flat mapping: the run fields and the objective's keys side by side (config.json)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "objective"}
        return {**self.objective.to_dict(), **out}

    def replace(self, **changes: Any) -> "TrainConfig":
        """A copy with ``changes`` applied, flat objective keys routed into the nested config
        (both re-validated: ObjectiveConfig on construction, the run by :func:`validate`)."""
        objective = {k: changes.pop(k) for k in list(changes) if k in OBJECTIVE_KEYS}
        if objective:
            changes["objective"] = dataclasses.replace(self.objective, **objective)
        cfg = dataclasses.replace(self, **changes)
        validate(cfg)
        return cfg

    @property
    def resolved_val_max_tokens(self) -> int:
        return self.val_max_tokens or self.max_response_length


_RUN_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig) if f.name != "objective"}
_OBJECTIVE_FIELDS = {f.name: f for f in dataclasses.fields(ObjectiveConfig)}
# Every flat config key a user can set (YAML, key=value) and its dataclass field.
FIELDS = {**_RUN_FIELDS, **_OBJECTIVE_FIELDS}


def help_text() -> str:
    lines = ["dsdr-train config fields (set in --config FILE.yaml or as key=value):", ""]
    for name, f in _RUN_FIELDS.items():
        lines.append(f"  {name:<28} {_type_name(f.type):<14} [{f.default!r}]  {f.metadata['help']}")
    lines += ["", f"  objective: {TrainConfig.__dataclass_fields__['objective'].metadata['help']}"
                  " (default: the algorithm's, see --algo):"]
    for name, f in _OBJECTIVE_FIELDS.items():
        lines.append(f"  {name:<28} {_type_name(f.type):<14} [algo default]  {f.metadata['help']}")
    return "\n".join(lines)


def _type_name(tp: Any) -> str:
    if isinstance(tp, str):
        return tp.replace(" | None", "?")
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "").replace(" | None", "?")


def _resolved_type(name: str) -> Any:
    if name in _OBJECTIVE_FIELDS:  # unset / null = the algorithm's default
        return typing.get_type_hints(ObjectiveConfig)[name] | None
    return typing.get_type_hints(TrainConfig)[name]


def coerce_value(key: str, value: Any, *, source: str) -> Any:
    """Check/convert ``value`` to the declared type of field ``key``; errors name key and source."""
    if key not in FIELDS:
        import difflib

        close = difflib.get_close_matches(key, list(FIELDS), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise DsdrError(f"{source}: unknown config key {key!r}{hint}; see dsdr-train --help-config")
    tp = _resolved_type(key)
    if typing.get_origin(tp) is tuple:  # a list of strings (stop): YAML list, or one string on the command line
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) and v for v in items):
            raise DsdrError(f"{source}: config key {key!r} expects a list of non-empty strings, got {value!r}")
        return tuple(items)
    args = typing.get_args(tp)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), tp) if args else tp
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null") and optional):
        if not optional:
            raise DsdrError(f"{source}: config key {key!r} cannot be null")
        return None
    try:
        if base is bool:
            if isinstance(value, str):
                low = value.lower()
                if low not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                value = low in ("true", "1", "yes")
            elif not isinstance(value, bool):
                raise ValueError(value)
        elif base is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            value = int(str(value)) if isinstance(value, str) else int(value)
        elif base is float:
            if isinstance(value, bool):
                raise ValueError(value)
            value = float(value)
        elif base is str:
            if not isinstance(value, (str, int, float)):
                raise ValueError(value)
            value = str(value)
    except (TypeError, ValueError):
        raise DsdrError(f"{source}: config key {key!r} expects {_type_name(tp)}, got {value!r}") from None
    choices = FIELDS[key].metadata.get("choices")
    if choices and value not in choices:
        raise DsdrError(f"{source}: config key {key!r} must be one of {', '.join(choices)}; got {value!r}")
    return value


def _is_list_key(key: str) -> bool:
    return key in FIELDS and typing.get_origin(_resolved_type(key)) is tuple


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``key=value`` strings -> typed dict (values parsed as YAML scalars, then type-checked)."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise DsdrError(f"override {item!r}: expected key=value")
        key, raw = item.split("=", 1)
        key = key.strip().replace("-", "_")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        if isinstance(value, dict) or (isinstance(value, list) and not _is_list_key(key)):
            value = raw  # (a list key, stop: stop=["a", "b"] is its YAML list)
        out[key] = coerce_value(key, value, source=f"override {item!r}")
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    import yaml

    path = Path(path)
    if not path.exists():
        raise DsdrError(f"{path}: config file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise DsdrError(f"{path}{where}: invalid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise DsdrError(f"{path}: expected a mapping of config keys")
    return {k: coerce_value(str(k), v, source=str(path)) for k, v in flat_values(data, source=str(path)).items()}


def flat_values(data: dict[str, Any], *, source: str) -> dict[str, Any]:
    """``data`` with a nested ``objective:`` mapping (if any) merged into the flat keys."""
    nested = data.get("objective")
    if nested is None:
        return dict(data)
    if not isinstance(nested, dict):
        raise DsdrError(f"{source}: config key 'objective' must be a mapping of objective keys")
    flat = {k: v for k, v in data.items() if k != "objective"}
    for key, value in nested.items():
        if key not in _OBJECTIVE_FIELDS:
            raise DsdrError(f"{source}: 'objective.{key}' is not an objective key; see dsdr-train --help-config")
        if key in flat and flat[key] != value:
            raise DsdrError(f"{source}: config key {key!r} is set twice (flat and under 'objective')")
        flat[key] = value
    return flat


def algo_defaults(algo: str) -> dict[str, Any]:
    if algo not in ALGO_DEFAULTS:
        raise DsdrError(f"config key 'algo': unknown algorithm {algo!r}; choose one of {', '.join(ALGOS)}")
    return dict(ALGO_DEFAULTS[algo])


def resolve_config(values: dict[str, Any]) -> TrainConfig:
    """Build the final config from flat keys: the objective keys (unset ones from ALGO_DEFAULTS)
    make the nested ObjectiveConfig, the others the run; everything validated."""
    values = flat_values(values, source="config")
    algo = coerce_value("algo", values.get("algo", "grpo"), source="algo")
    merged = {k: v for k, v in values.items() if v is not None or k not in _OBJECTIVE_FIELDS}
    # Setting a weight implies switching its term on (ObjectiveConfig requires the pair to agree).
    if merged.get("kl_coef") is not None and merged.get("use_kl") is None:
        merged["use_kl"] = merged["kl_coef"] > 0
    if merged.get("lambda_l") is not None and merged.get("local_term") is None:
        merged["local_term"] = merged["lambda_l"] > 0
    objective = {**algo_defaults(algo), **{k: merged.pop(k) for k in list(merged) if k in _OBJECTIVE_FIELDS}}
    objective.pop("algo", None)
    max_response_length = int(merged.get("max_response_length", FIELDS["max_response_length"].default))
    if objective["loss_agg_mode"] == "seq-mean-token-sum-norm" and merged.get("loss_norm_constant") is None:
        # Dr.GRPO's constant, as verl's loss_scale_factor: fixed over training (a padded width is not)
        merged["loss_norm_constant"] = max_response_length
    if merged.get("micro_batch_size") is None and merged.get("engine", "compact") == "compact":
        merged["micro_batch_size"] = 8  # engine trl picks its own default from its batch layout (mapping.geometry)
    if objective["overlong_shaping"] and objective["overlong_buffer"] is None:
        objective["overlong_buffer"] = max(1, max_response_length // 4)
    try:
        objective_settings = objective_config(algo, **objective)
    except ValueError as exc:
        raise DsdrError(f"objective config of algo {algo!r}: {exc}") from None
    cfg = TrainConfig(**merged, objective=objective_settings)
    validate(cfg)
    return cfg


def validate(cfg: TrainConfig) -> None:
    flat = cfg.to_dict()  # the error names the flat key the user set, objective keys included

    def need(cond: bool, key: str, why: str) -> None:
        if not cond:
            raise DsdrError(f"config key {key!r}: {why} (got {flat[key]!r})")

    for key in ("model", "train_data", "out"):
        need(bool(getattr(cfg, key)), key, "is required")
    need(cfg.group_size >= 2, "group_size", "needs at least 2 rollouts per prompt for a group advantage")
    need(cfg.prompts_per_step >= 1, "prompts_per_step", "must be >= 1")
    need(1 <= cfg.mini_batch_prompts <= cfg.prompts_per_step, "mini_batch_prompts", "must be in [1, prompts_per_step]")
    need(cfg.prompts_per_step % cfg.mini_batch_prompts == 0, "mini_batch_prompts", "must divide prompts_per_step")
    need(cfg.micro_batch_size is None or cfg.micro_batch_size >= 1, "micro_batch_size", "must be >= 1 (or null)")
    need(cfg.ppo_epochs >= 1, "ppo_epochs", "must be >= 1")
    need(cfg.total_steps >= 1, "total_steps", "must be >= 1")
    need(cfg.temperature > 0, "temperature", "must be > 0 (the loss divides logits by it)")
    need(0 < cfg.top_p <= 1, "top_p", "must be in (0, 1]")
    need(cfg.max_response_length >= 1, "max_response_length", "must be >= 1")
    need(cfg.lr > 0, "lr", "must be > 0")
    need(cfg.val_n >= 1, "val_n", "must be >= 1")
    for key, value in flat.items():  # NaN/inf would pass every comparison check below
        if isinstance(value, float):
            need(math.isfinite(value), key, "must be a finite number")
    for key in ("save_every", "keep_last", "val_every", "warmup_steps"):
        need(getattr(cfg, key) >= 0, key, "must be >= 0")
    for key in ("max_prompt_length", "generation_batch_size"):
        need(getattr(cfg, key) >= 1, key, "must be >= 1")
    for key in ("max_train_examples", "val_max_problems", "val_max_tokens", "grade_workers"):
        need(getattr(cfg, key) is None or getattr(cfg, key) >= 1, key, "must be >= 1 (or null)")
    need(cfg.time_limit_s is None or cfg.time_limit_s > 0, "time_limit_s", "must be > 0 (or null)")
    need(cfg.grading_timeout_s > 0, "grading_timeout_s", "must be > 0")
    need(cfg.weight_decay >= 0, "weight_decay", "must be >= 0")
    need(cfg.max_grad_norm >= 0, "max_grad_norm", "must be >= 0 (0 = off)")
    need(0 <= cfg.adam_beta1 < 1, "adam_beta1", "must be in [0, 1)")
    need(0 <= cfg.adam_beta2 < 1, "adam_beta2", "must be in [0, 1)")
    need(0 < cfg.vllm_gpu_memory_utilization <= 1, "vllm_gpu_memory_utilization", "must be in (0, 1]")
    need(cfg.val_temperature >= 0, "val_temperature", "must be >= 0")
    need(cfg.val_pass1_temperature >= 0, "val_pass1_temperature", "must be >= 0")
    need(0 < cfg.val_top_p <= 1, "val_top_p", "must be in (0, 1]")
    if cfg.loss_norm_constant is not None:
        need(cfg.loss_norm_constant >= 1, "loss_norm_constant", "must be >= 1")
    if cfg.encoder_max_seq_length is not None:
        need(cfg.encoder_max_seq_length >= 3, "encoder_max_seq_length", "must be >= 3 (room for [CLS]/[SEP])")
    if cfg.objective.overlong_buffer is not None:
        need(0 < cfg.objective.overlong_buffer <= cfg.max_response_length, "overlong_buffer", "must be in (0, max_response_length]")
    from dsdr_train.core_algos.pipeline import check_registered  # torch: only once a run is configured

    try:
        check_registered(cfg.objective)
    except ValueError as exc:
        raise DsdrError(f"config key {exc}") from None


def config_from_sources(*, yaml_path: str | None, cli: dict[str, Any], overrides: dict[str, Any]) -> TrainConfig:
    values: dict[str, Any] = {}
    if yaml_path:
        from dsdr_train.packaged import resolve_config_path

        values.update(load_yaml(resolve_config_path(yaml_path)))
    values.update({k: coerce_value(k, v, source=f"--{k.replace('_', '-')}") for k, v in cli.items() if v is not None})
    values.update(overrides)
    return resolve_config(values)


def config_from_dict(data: dict[str, Any], *, source: str) -> TrainConfig:
    """Rebuild a config from a run's config.json (resume): flat keys, or a nested ``objective``."""
    values = {k: coerce_value(k, v, source=source) for k, v in flat_values(data, source=source).items()}
    return resolve_config(values)


__all__ = ["ALGOS", "FIELDS", "OBJECTIVE_KEYS", "TrainConfig", "flat_values", "help_text", "parse_overrides", "load_yaml", "resolve_config",
           "config_from_sources", "config_from_dict", "coerce_value"]
