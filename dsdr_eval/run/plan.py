"""Step 1 of ``dsdr-eval run``: the plan. From the run options: the protocol (with its overrides), the
prompt template, the --backend openai endpoint (checked before anything loads), the benchmarks, the
answer extraction, the backend (``--backend auto`` chooses by the run's size), the model and the
config.json record of the run (``plan_run``), with every (benchmark, phase, problem, sample_idx) the
protocol asks for (``expected_keys``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from dsdr_eval.errors import DsdrError
from dsdr_eval.options.commands import RunOptions
from dsdr_eval.prompts import PromptTemplate
from dsdr_eval.protocols import PROTOCOLS, Protocol
from dsdr_eval.rundir.samples import SampleKey


@dataclass(frozen=True)
class RunPlan:
    """What the options resolve to, before the run directory is read. ``config`` is the config.json
    record of this run (the generation step completes its backend and chat fields in place)."""

    out: Path
    protocol: Protocol
    template: PromptTemplate
    benchmarks: list[Any]  # BenchmarkData
    extraction: str  # the answer convention this run's settings choose
    backend_name: str
    model: Any  # dsdr_eval.models.ResolvedModel
    openai: tuple[Any, dict[str, Any] | None] | None  # --backend openai: the endpoint and --extra-body
    chat_template_kwargs: dict[str, Any]  # --chat-template-kwargs, checked ({} when not given)
    config: dict[str, Any]
    expected: set[SampleKey]  # every sample the protocol asks for (however requests are split)
    shard: Any = None  # dsdr_eval.run.shard.Shard of `run --shard I/N` (None: the whole run)


def plan_run(options: RunOptions, command: list[str] | None) -> RunPlan:
    """Resolve the options; every check that needs no model or engine is made here, first.
    ``command``: what config.json records as the command (default ``sys.argv``)."""
    from dsdr_eval.grading.extraction import choose_extraction
    from dsdr_eval.grading.reasoning import parse_reasoning_format
    from dsdr_eval.prompts import load_template
    from dsdr_eval.protocols import apply_overrides, protocol_file_record, resolve_protocol
    from dsdr_eval.run.shard import Shard
    from dsdr_eval.tasks import benchmark_extraction

    protocol = apply_overrides(resolve_protocol(options.protocol), n=options.n, temperature=options.temperature,
                               top_p=options.top_p, pass1_temperature=options.pass1_temperature,
                               pass1_top_p=options.pass1_top_p, max_tokens=options.max_tokens, seed=options.seed,
                               phases=options.phases, top_k=options.top_k, min_p=options.min_p,
                               pass1_top_k=options.pass1_top_k, pass1_min_p=options.pass1_min_p,
                               stop=options.stop)
    template = load_template(options.template)
    # every --backend openai argument is checked before anything is resolved or loaded (auto is never openai)
    openai = _openai_options(options) if options.backend == "openai" else None
    template_kwargs = chat_template_kwargs(options)
    benchmarks = load_benchmarks(options.benchmarks, data_dir=options.data_dir, limit=options.limit,
                                 subset_seed=options.subset_seed)
    extraction = choose_extraction(options.extraction, protocol.extraction,
                                   {b.name: benchmark_extraction(b.name) for b in benchmarks})
    auto = _auto_choice(options.backend, benchmarks, protocol)
    backend_name = auto.chosen if auto is not None else options.backend
    model = resolve_run_model(options, backend_name)
    shard = Shard.parse(options.shard)
    config: dict[str, Any] = {
        "kind": "eval", "label": options.label, "command": list(command if command is not None else sys.argv),
        "model": model.to_config(),
        "backend": {"name": backend_name, **({"auto": auto.to_config()} if auto is not None else {})},
        "protocol": protocol.to_config(),
        # a file protocol: where its definition came from (the run identity is `protocol` itself)
        **({} if options.protocol in PROTOCOLS else {"protocol_file": protocol_file_record(Path(options.protocol))}),
        "template": {"name": template.name, "text": template.text, "raw_text": template.raw_text,
                     "mode": options.prompt_mode, "chat": None,
                     # part of the run identity (they change the prompt); absent when not given
                     **({"chat_template_kwargs": template_kwargs} if options.chat_template_kwargs is not None else {})},
        "benchmarks": [b.to_config() for b in benchmarks],
        "subset": {"limit": options.limit, "subset_seed": options.subset_seed},
        "grading": {"grading_timeout_s": options.grading_timeout_s, "workers": options.grading_workers},
        "extraction": extraction,  # the answer convention `score` reads back (not part of the run identity)
        # how `score` splits a thinking model's reasoning from its answer (absent: auto; not identity either)
        **({"reasoning_format": parse_reasoning_format(options.reasoning_format).spec}
           if options.reasoning_format is not None else {}),
        "diversity": {"enabled": not options.no_diversity},
        # run --shard: which part of the run this directory holds (completed by the generation step)
        **({"shard": {"index": shard.index, "count": shard.count}} if shard is not None else {}),
    }
    return RunPlan(Path(options.out), protocol, template, benchmarks, extraction, backend_name, model, openai,
                   template_kwargs, config, expected_keys(benchmarks, protocol), shard)


def _openai_options(options: RunOptions) -> tuple[Any, dict[str, Any] | None]:
    """The endpoint and --extra-body of ``--backend openai``, checked (cheap: no connection made)."""
    from dsdr_eval.options.endpoint import MODEL_ENDPOINT, endpoint_config
    from dsdr_eval.openai_api.client import split_base_urls

    if not split_base_urls(options.base_url):
        raise DsdrError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
    extra = _json_object(options.extra_body, "--extra-body") if options.extra_body else None
    return endpoint_config(options, MODEL_ENDPOINT, model=options.model), extra


def _json_object(text: str, option: str) -> dict[str, Any]:
    """The JSON object an option's value spells; a one-line DsdrError naming the option otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DsdrError(f"{option}: invalid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise DsdrError(f"{option}: expected a JSON object")
    return value


def chat_template_kwargs(options: RunOptions) -> dict[str, Any]:
    """``--chat-template-kwargs JSON``: extra variables of the chat template (e.g. ``{"enable_thinking":
    false}``), checked: a JSON object; {} when not given."""
    if options.chat_template_kwargs is None:
        return {}
    return _json_object(options.chat_template_kwargs, "--chat-template-kwargs")


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


def resolve_run_model(options: RunOptions, backend_name: str) -> Any:
    """The model of the run; ``options.model`` may already be a ``dsdr_eval.models.ResolvedModel``."""
    from dsdr_eval.models import ResolvedModel, resolve_model

    if isinstance(options.model, ResolvedModel):
        return options.model
    if backend_name == "openai" and not Path(options.model).expanduser().exists():
        return ResolvedModel(options.model, options.model, False, None, options.revision)  # a served model name
    return resolve_model(options.model, revision=options.revision)



@dataclass(frozen=True)
class BenchmarkData:
    name: str
    source: str
    problems: tuple[Any, ...]  # dsdr_eval.tasks.Problem

    def to_config(self) -> dict[str, Any]:
        ids = "\n".join(p.id for p in self.problems).encode("utf-8")
        return {"name": self.name, "source": self.source, "n_problems": len(self.problems),
                "ids_sha256": hashlib.sha256(ids).hexdigest()[:16]}


def load_benchmarks(names: Sequence[str], *, data_dir: str | Path | None, limit: int | None,
                    subset_seed: int | None) -> list[BenchmarkData]:
    from dsdr_eval.tasks import load_benchmark, resolve_data_dir

    loaded, seen = [], set()
    for name in names:
        problems = load_benchmark(name, data_dir=data_dir, limit=limit, subset_seed=subset_seed)
        if not problems:
            raise DsdrError(f"benchmark {name}: no problems")
        bench_name = problems[0].benchmark
        if bench_name in seen:
            raise DsdrError(f"--benchmarks: {bench_name} listed twice")
        seen.add(bench_name)
        directory = resolve_data_dir(data_dir)
        local = directory / f"{name}.jsonl" if directory is not None else None
        source = str(local) if local is not None and local.is_file() else str(name)
        loaded.append(BenchmarkData(bench_name, source, tuple(problems)))
    return loaded


def expected_keys(benchmarks: Sequence[BenchmarkData], protocol: Protocol) -> set[SampleKey]:
    """Every sample key the protocol asks for (independent of how requests are split)."""
    return {SampleKey(b.name, phase.phase, p.id, idx) for b in benchmarks for phase in protocol.phases
            for p in b.problems for idx in range(phase.n)}
