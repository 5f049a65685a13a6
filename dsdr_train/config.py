"""The trainer configuration: one frozen dataclass, every field documented.

Precedence (lowest to highest): dataclass defaults < the algorithm's objective defaults
(``core_algos.ALGO_DEFAULTS``, ALGORITHMS.md §1-§4) < a YAML file (``--config``) < CLI flags
(``--algo/--model/--train-data/--out``) < ``key=value`` overrides. Objective fields default to
``None`` meaning "the algorithm's default"; ``resolve_config`` fills them in, so the recorded
config.json always states the value actually used.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError

ALGOS = ("grpo", "dapo", "dsdr", "dsdr_wo_gd", "dsdr_wo_gc", "darling")


def _f(default: Any, help: str, **choices: Any) -> Any:
    metadata = {"help": help}
    if "choices" in choices:
        metadata["choices"] = tuple(choices["choices"])
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class TrainConfig:
    # --- run -----------------------------------------------------------------------------
    algo: str = _f("grpo", "objective: grpo | dapo | dsdr | dsdr_wo_gd | dsdr_wo_gc | darling",
                   choices=ALGOS)
    model: str = _f("", "policy to train: HF dir, hub id or alias (smollm2-135m)")
    train_data: str = _f("", "training problems: a JSONL file (problem/answer) or a hub dataset id")
    out: str = _f("", "run directory (config.json, metrics.jsonl, checkpoints/, final/)")
    seed: int = _f(0, "global seed (prompt order, sampling, init of everything random)")
    device: str = _f("auto", "cpu | cuda | auto (cuda when available); each DDP rank uses its local GPU")
    dtype: str = _f("auto", "float32 | bfloat16 | auto (bf16 on GPU, fp32 on CPU)",
                    choices=("auto", "float32", "bfloat16", "float16"))
    total_steps: int = _f(100, "number of optimizer steps (rollout batches) to train")
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
    rollout_engine: str = _f("hf", "hf (transformers generate) | vllm (in-process engine, weights synced every step)",
                             choices=("hf", "vllm"))
    group_size: int = _f(8, "G: rollouts per prompt (§3.5: 8)")
    prompts_per_step: int = _f(256, "prompts per rollout batch (§3.5: 256); split evenly over DDP ranks")
    mini_batch_prompts: int = _f(16, "prompts per PPO mini-batch = per optimizer update (§3.5: 16)")
    micro_batch_size: int = _f(8, "rollouts per forward/backward pass (gradient accumulation unit)")
    ppo_epochs: int = _f(1, "passes over each rollout batch")
    temperature: float = _f(1.0, "rollout sampling temperature (§3.5: 1.0); logits are divided by it in the loss too")
    top_p: float = _f(1.0, "rollout nucleus sampling")
    max_response_length: int = _f(4096, "max new tokens per rollout (§3.5: 4096 / 8192)")
    generation_batch_size: int = _f(64, "rollouts per transformers.generate call (hf engine)")
    check_on_policy: bool = _f(False, "hf engine: keep the sampler's log-probs of every token and log "
                               "rollout/ratio_dev_max = max |pi_old/q - 1| (costs the scores of every step)")
    vllm_gpu_memory_utilization: float = _f(0.4, "vllm engine: fraction of GPU memory for weights + KV cache")
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
    # --- objective (None = the algorithm's default from core_algos.ALGO_DEFAULTS) -----------
    # Names are those of core_algos.ALGO_DEFAULTS / ObjectiveConfig, which validates them.
    std_mode: str | None = _f(None, "advantage normalisation: population | bessel | none (§1)")
    eps: float | None = _f(None, "eps in A = (r - mean) / (std + eps) (§1: 1e-6)")
    clip_ratio_low: float | None = _f(None, "PPO clip eps_low (§1: 0.2)")
    clip_ratio_high: float | None = _f(None, "PPO clip eps_high (§1: GRPO 0.2, DAPO/DSDR 0.28)")
    log_ratio_clamp: float | None = _f(None, "clamp of the log importance ratio before exp (§1: 20)")
    loss_agg_mode: str | None = _f(None, "token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm (§1)")
    loss_norm_constant: int | None = _f(None, "C of seq-mean-token-sum-norm (Dr.GRPO: loss = token sum / C); "
                                        "None = max_response_length (verl's loss_scale_factor); unused by other modes")
    reward: str | None = _f(None, "reward shaping: verifier | dsdr (§3.2 bonus) | darling (§4 r*Div)")
    lambda_d: float | None = _f(None, "DSDR correct-only diversity bonus weight (§3.2: 0.001)")
    sigma_d: float | None = _f(None, "DSDR diversity clip bound (§3.2: 1.0, not given in the paper)")
    tau: float | None = _f(None, "DSDR coupling softmax temperature (§3.3: 5)")
    uniform_coupling: bool | None = _f(None, "coupling weights uniform over correct rollouts (§3.6 w/o GD)")
    local_term: bool | None = _f(None, "add the DSDR local entropy term lambda_l * J_local (§3.4)")
    lambda_l: float | None = _f(None, "DSDR local term weight (§3.5: 0.001)")
    use_kl: bool | None = _f(None, "KL penalty to the frozen initial policy (§1: off); set with kl_coef")
    kl_coef: float | None = _f(None, "beta of the KL penalty (§1: 0)")
    kl_estimator: str | None = _f(None, "KL estimator (low_var_kl = k3, the only one implemented)")
    dynamic_sampling: bool | None = _f(None, "DAPO: drop zero-variance-accuracy groups and resample (§2)")
    max_num_gen_batches: int | None = _f(None, "DAPO: stop resampling after this many generation batches (§2: 10)")
    dapo_exhausted: str | None = _f(None, "DAPO, max_num_gen_batches reached with the batch not full: train (on the "
                                    "groups kept; default) | error (stop, as verl does)", choices=("train", "error"))
    singleton_advantage: str | None = _f(None, "advantage of a group of one rollout: zero (default) | reward "
                                         "(verl: mean 0, std 1)", choices=("zero", "reward"))
    local_norm: str | None = _f(None, "divisor of the mini-batch sum of J_local (§3.4 is per prompt): prompts "
                                "(default) | correct_prompts (prompts with a correct rollout) | none (plain sum)",
                                choices=("prompts", "correct_prompts", "none"))
    overlong_shaping: bool | None = _f(None, "DAPO overlong reward shaping (§2)")
    overlong_buffer: int | None = _f(None, "DAPO overlong buffer in tokens (§2: max_response_length // 4)")
    overlong_factor: float | None = _f(None, "DAPO overlong penalty factor (§2: 1.0)")
    darling_floor: float | None = _f(None, "DARLING Div floor (§4: 0.1)")
    # --- diversity -------------------------------------------------------------------------
    encoder: str | None = _f(None, "sentence encoder for D_emb (None = all-MiniLM-L6-v2, offline)")
    encoder_chunked: bool = _f(False, "embed a long rollout as the mean of its chunk embeddings instead of the "
                               "encoder's truncation (§3.1 option; dsdr-eval diversity --chunked)")
    encoder_max_seq_length: int | None = _f(None, "encoder truncation / chunk window in word pieces "
                                            "(None = the encoder's own: 256 for all-MiniLM-L6-v2)")
    formula_rules: str = _f("extended", "formula extraction for D_eq (§3.1; the paper is silent): extended = DIVER's "
                            "\\[..\\], \\(..\\), $$..$$, $..$ plus equation-like \\begin{ENV} (default) | diver = "
                            "the four delimiters only", choices=("extended", "diver"))
    darling_partition: str = _f("embedding", "DARLING partition (dsdr_eval.partition_methods.make_equivalence spec): embedding "
                                "(cosine >= darling_threshold) | answer-formula | classifier:PATH | judge")
    darling_threshold: float | None = _f(None, "DARLING threshold (embedding cosine / classifier probability; None = dsdr_eval default 0.9 / 0.5)")
    # --- grading ---------------------------------------------------------------------------
    grade_timeout_s: float = _f(5.0, "Math-Verify timeout per rollout (timeout counts as incorrect)")
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
    log_diversity: bool = _f(True, "compute DSDR diversity for logging even when the objective does not use it")
    progress: bool = _f(True, "show progress bars")

    # ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def resolved_val_max_tokens(self) -> int:
        return self.val_max_tokens or self.max_response_length


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
# The objective fields whose None default is filled in from core_algos.ALGO_DEFAULTS[algo].
OBJECTIVE_FIELDS = (
    "std_mode", "eps", "clip_ratio_low", "clip_ratio_high", "log_ratio_clamp", "loss_agg_mode", "reward",
    "lambda_d", "sigma_d", "tau", "uniform_coupling", "local_term", "lambda_l", "use_kl", "kl_coef",
    "kl_estimator", "dynamic_sampling", "max_num_gen_batches", "dapo_exhausted", "singleton_advantage", "local_norm",
    "overlong_shaping", "overlong_buffer", "overlong_factor", "darling_floor",
)


def help_text() -> str:
    lines = ["dsdr-train config fields (set in --config FILE.yaml or as key=value):", ""]
    for f in dataclasses.fields(TrainConfig):
        typ = _type_name(f.type)
        default = "algo default" if f.name in OBJECTIVE_FIELDS else repr(f.default)
        lines.append(f"  {f.name:<28} {typ:<14} [{default}]  {f.metadata['help']}")
    return "\n".join(lines)


def _type_name(tp: Any) -> str:
    if isinstance(tp, str):
        return tp.replace(" | None", "?")
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "").replace(" | None", "?")


def _resolved_type(name: str) -> Any:
    return typing.get_type_hints(TrainConfig)[name]


def coerce_value(key: str, value: Any, *, source: str) -> Any:
    """Check/convert ``value`` to the declared type of field ``key``; errors name key and source."""
    if key not in FIELDS:
        import difflib

        close = difflib.get_close_matches(key, list(FIELDS), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise DsdrError(f"{source}: unknown config key {key!r}{hint}; see dsdr-train --help-config")
    tp = _resolved_type(key)
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
        if isinstance(value, (dict, list)):
            value = raw
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
    return {k: coerce_value(str(k), v, source=str(path)) for k, v in data.items()}


def algo_defaults(algo: str) -> dict[str, Any]:
    from dsdr_train.core_algos import ALGO_DEFAULTS

    if algo not in ALGO_DEFAULTS:
        raise DsdrError(f"config key 'algo': unknown algorithm {algo!r}; choose one of {', '.join(ALGOS)}")
    return dict(ALGO_DEFAULTS[algo])


def resolve_config(values: dict[str, Any]) -> TrainConfig:
    """Build the final config: fill objective fields from ALGO_DEFAULTS and validate everything."""
    algo = coerce_value("algo", values.get("algo", "grpo"), source="algo")
    merged = dict(values)
    # Setting a weight implies switching its term on (core_algos requires the pair to agree).
    if merged.get("kl_coef") is not None and merged.get("use_kl") is None:
        merged["use_kl"] = merged["kl_coef"] > 0
    if merged.get("lambda_l") is not None and merged.get("local_term") is None:
        merged["local_term"] = merged["lambda_l"] > 0
    for key, value in algo_defaults(algo).items():
        if key in FIELDS and merged.get(key) is None:
            merged[key] = value
    if merged.get("loss_agg_mode") == "seq-mean-token-sum-norm" and merged.get("loss_norm_constant") is None:
        # Dr.GRPO's constant, as verl's loss_scale_factor: fixed over training (a padded width is not)
        merged["loss_norm_constant"] = int(merged.get("max_response_length", FIELDS["max_response_length"].default))
    if merged.get("overlong_shaping") and merged.get("overlong_buffer") is None:
        merged["overlong_buffer"] = max(1, int(merged.get("max_response_length", FIELDS["max_response_length"].default)) // 4)
    cfg = TrainConfig(**merged)
    validate(cfg)
    return cfg


def objective_of(cfg: TrainConfig) -> Any:
    """core_algos.ObjectiveConfig of this run (its validation names the offending setting)."""
    from dsdr_train.core_algos import ALGO_DEFAULTS, objective_config

    try:
        return objective_config(cfg.algo, **{k: getattr(cfg, k) for k in ALGO_DEFAULTS[cfg.algo] if k in FIELDS})
    except ValueError as exc:
        raise DsdrError(f"objective config of algo {cfg.algo!r}: {exc}") from None


def validate(cfg: TrainConfig) -> None:
    def need(cond: bool, key: str, why: str) -> None:
        if not cond:
            raise DsdrError(f"config key {key!r}: {why} (got {getattr(cfg, key)!r})")

    for key in ("model", "train_data", "out"):
        need(bool(getattr(cfg, key)), key, "is required")
    need(cfg.group_size >= 2, "group_size", "needs at least 2 rollouts per prompt for a group advantage")
    need(cfg.prompts_per_step >= 1, "prompts_per_step", "must be >= 1")
    need(1 <= cfg.mini_batch_prompts <= cfg.prompts_per_step, "mini_batch_prompts", "must be in [1, prompts_per_step]")
    need(cfg.prompts_per_step % cfg.mini_batch_prompts == 0, "mini_batch_prompts", "must divide prompts_per_step")
    need(cfg.micro_batch_size >= 1, "micro_batch_size", "must be >= 1")
    need(cfg.ppo_epochs >= 1, "ppo_epochs", "must be >= 1")
    need(cfg.total_steps >= 1, "total_steps", "must be >= 1")
    need(cfg.temperature > 0, "temperature", "must be > 0 (the loss divides logits by it)")
    need(0 < cfg.top_p <= 1, "top_p", "must be in (0, 1]")
    need(cfg.max_response_length >= 1, "max_response_length", "must be >= 1")
    need(cfg.lr > 0, "lr", "must be > 0")
    need(cfg.val_n >= 1, "val_n", "must be >= 1")
    for key, value in cfg.to_dict().items():  # NaN/inf would pass every comparison check below
        if isinstance(value, float):
            need(math.isfinite(value), key, "must be a finite number")
    for key in ("save_every", "keep_last", "val_every", "warmup_steps"):
        need(getattr(cfg, key) >= 0, key, "must be >= 0")
    for key in ("max_prompt_length", "generation_batch_size"):
        need(getattr(cfg, key) >= 1, key, "must be >= 1")
    for key in ("max_train_examples", "val_max_problems", "val_max_tokens", "grade_workers"):
        need(getattr(cfg, key) is None or getattr(cfg, key) >= 1, key, "must be >= 1 (or null)")
    need(cfg.time_limit_s is None or cfg.time_limit_s > 0, "time_limit_s", "must be > 0 (or null)")
    need(cfg.grade_timeout_s > 0, "grade_timeout_s", "must be > 0")
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
    if cfg.overlong_buffer is not None:
        need(0 < cfg.overlong_buffer <= cfg.max_response_length, "overlong_buffer", "must be in (0, max_response_length]")
    objective_of(cfg)


def config_from_sources(*, yaml_path: str | None, cli: dict[str, Any], overrides: dict[str, Any]) -> TrainConfig:
    values: dict[str, Any] = {}
    if yaml_path:
        values.update(load_yaml(yaml_path))
    values.update({k: coerce_value(k, v, source=f"--{k.replace('_', '-')}") for k, v in cli.items() if v is not None})
    values.update(overrides)
    return resolve_config(values)


def config_from_dict(data: dict[str, Any], *, source: str) -> TrainConfig:
    """Rebuild a config from a run's config.json (resume)."""
    values = {k: coerce_value(k, v, source=source) for k, v in data.items()}
    return resolve_config(values)


__all__ = ["ALGOS", "TrainConfig", "help_text", "parse_overrides", "load_yaml", "resolve_config",
           "config_from_sources", "config_from_dict", "coerce_value"]
