"""Bad command-line arguments, table-driven: every subcommand of dsdr-eval, dsdr-train and
dsdr-dashboard answers each with exit code 2 and ONE line on stderr, never a traceback, and
before it loads anything.

The CLIs run in-process (their ``main(argv)``). Whatever would load or compute something heavy
(a model backend, an encoder, the grader, a judge request, report writing, the trainer's model,
the Streamlit server) is replaced by a tripwire: a case that reaches one was accepted, and fails.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Callable

import pytest

from dsdr_eval.rundir.jsonl import write_json, write_jsonl


class Tripwire(Exception):
    """Raised where the CLI would start loading or computing: the arguments were accepted."""


def _trip(what: str) -> Callable[..., None]:
    def trip(*args: object, **kwargs: object) -> None:
        raise Tripwire(what)
    return trip


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """Small valid inputs the cases start from; each case breaks one argument."""
    base = tmp_path_factory.mktemp("bad-args")
    rows = [{"benchmark": "math500", "problem_id": f"p{p}", "sample_idx": i, "phase": "sampling",
             "problem": f"Problem {p}", "gold": "1", "completion": f"so \\boxed{{{i}}}", "correct": i == 1,
             "status": "correct" if i == 1 else "incorrect", "extracted": str(i)}
            for p in range(2) for i in range(3)]
    run = base / "run"
    run.mkdir()
    write_jsonl(run / "graded.jsonl", rows)
    write_json(run / "metrics.json", {"benchmarks": {"math500": {"avg@n": 1 / 3, "n_problems": 2}}})
    write_json(run / "config.json", {"kind": "eval", "label": "bad-args"})
    samples_only = base / "samples_only"
    samples_only.mkdir()
    write_jsonl(samples_only / "samples.jsonl", [{k: v for k, v in r.items() if k not in ("correct", "status")}
                                                 for r in rows])
    empty_dir = base / "empty"
    empty_dir.mkdir()
    a_file = base / "a_file.txt"
    a_file.write_text("not a directory\n")
    model = base / "model"
    model.mkdir()
    write_json(model / "config.json", {"model_type": "llama"})
    train_data = base / "train.jsonl"
    write_jsonl(train_data, [{"problem": "1+1?", "answer": "2"}])
    return {"base": base, "run": run, "samples": samples_only / "samples.jsonl", "samples_only": samples_only,
            "empty": empty_dir, "file": a_file, "model": model, "train_data": train_data}


@pytest.fixture
def tripwires(monkeypatch):
    """Everything past argument validation is a tripwire."""
    import dashboards.launch
    import dsdr_eval.diversity_metrics.semantic
    import dsdr_eval.models
    import dsdr_eval.openai_api.client
    import dsdr_eval.reporting.build
    import dsdr_eval.run.evaluation
    import dsdr_eval.scoring.score

    monkeypatch.setattr(dsdr_eval.run.evaluation, "make_backend", _trip("run: built a backend"))
    monkeypatch.setattr(dsdr_eval.scoring.score, "score_samples", _trip("score: started grading"))
    monkeypatch.setattr(dsdr_eval.diversity_metrics.semantic, "load_encoder", _trip("diversity: loaded the encoder"))
    monkeypatch.setattr(dsdr_eval.openai_api.client.OpenAICompatClient, "chat_many", _trip("judge: sent requests"))
    monkeypatch.setattr(dsdr_eval.reporting.build, "_write_report", _trip("report: wrote a report"))
    monkeypatch.setattr(dashboards.launch.subprocess, "call", _trip("dashboard: started streamlit"))
    real_resolve = dsdr_eval.models.resolve_model

    def resolve_model(spec: str, revision: str | None = None):
        if spec == "TRAIN-MODEL":
            raise Tripwire("train: resolved the policy model")
        return real_resolve(spec, revision)

    monkeypatch.setattr(dsdr_eval.models, "resolve_model", resolve_model)


def invoke(main: Callable[[list[str]], int], argv: list[str]) -> tuple[object, str, str]:
    """(exit code or what happened instead, stdout, stderr) of ``main(argv)`` in this process."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code: object = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Tripwire as exc:
            code = f"accepted ({exc})"
        except Exception as exc:  # noqa: BLE001 - what a user would see as a traceback
            code = f"traceback ({type(exc).__name__}: {exc})"
    return code, out.getvalue(), err.getvalue()


# Each case: (id, program, argv template). {run}, {file}, ... are replaced by the `world` paths;
# RUN and SCORE and JUDGE and REPORT and TRAIN are the valid base arguments the case is added to.
RUN = ["run", "--model", "{model}", "--benchmarks", "math500", "--data-dir", "{data_dir}", "--limit", "2",
       "--backend", "hf", "--out", "{base}/run_out", "--no-diversity", "--no-progress"]
SCORE = ["score", "{samples}", "--out", "{base}/score_out", "--no-progress"]
DIVERSITY = ["diversity", "{run}", "--no-progress"]
JUDGE = ["judge", "{run}", "--judge-model", "m", "--judge-base-url", "http://127.0.0.1:9/v1", "--no-progress"]
REPORT = ["report", "{run}", "--out", "{base}/report_out"]
TRAIN = ["--model", "TRAIN-MODEL", "--train-data", "{train_data}", "--out", "{base}/train_out"]

CASES: list[tuple[str, str, list[str]]] = [
    # ---------------------------------------------------------------- dsdr-eval (top level)
    ("eval-no-command", "eval", []),
    ("eval-unknown-command", "eval", ["nosuch"]),
    ("eval-unknown-option", "eval", ["--bogus"]),
    # ---------------------------------------------------------------- dsdr-eval run
    ("run-temperature-nan", "eval", RUN + ["--temperature", "nan"]),
    ("run-temperature-inf", "eval", RUN + ["--temperature", "inf"]),
    ("run-temperature-negative", "eval", RUN + ["--temperature", "-1"]),
    ("run-temperature-word", "eval", RUN + ["--temperature", "warm"]),
    ("run-top-p-zero", "eval", RUN + ["--top-p", "0"]),
    ("run-top-p-above-1", "eval", RUN + ["--top-p", "1.5"]),
    ("run-top-p-nan", "eval", RUN + ["--top-p", "nan"]),
    ("run-pass1-temperature-nan", "eval", RUN + ["--pass1-temperature", "nan"]),
    ("run-pass1-top-p-2", "eval", RUN + ["--pass1-top-p", "2"]),
    ("run-top-k-below-minus-1", "eval", RUN + ["--top-k", "-2"]),
    ("run-top-k-fraction", "eval", RUN + ["--top-k", "2.5"]),
    ("run-min-p-1", "eval", RUN + ["--min-p", "1"]),
    ("run-min-p-negative", "eval", RUN + ["--min-p", "-0.1"]),
    ("run-min-p-nan", "eval", RUN + ["--min-p", "nan"]),
    ("run-pass1-top-k-word", "eval", RUN + ["--pass1-top-k", "many"]),
    ("run-pass1-min-p-2", "eval", RUN + ["--pass1-min-p", "2"]),
    ("run-n-zero", "eval", RUN + ["--n", "0"]),
    ("run-n-negative", "eval", RUN + ["--n", "-3"]),
    ("run-n-word", "eval", RUN + ["--n", "abc"]),
    ("run-max-tokens-zero", "eval", RUN + ["--max-tokens", "0"]),
    ("run-limit-zero", "eval", RUN + ["--limit", "0"]),
    ("run-limit-negative", "eval", RUN + ["--limit", "-1"]),
    ("run-seed-negative", "eval", RUN + ["--seed", "-1"]),
    ("run-subset-seed-word", "eval", RUN + ["--subset-seed", "abc"]),
    ("run-batch-size-zero", "eval", RUN + ["--batch-size", "0"]),
    ("run-tensor-parallel-zero", "eval", RUN + ["--tensor-parallel-size", "0"]),
    ("run-data-parallel-zero", "eval", RUN + ["--data-parallel-size", "0"]),
    ("run-gpu-memory-zero", "eval", RUN + ["--gpu-memory-utilization", "0"]),
    ("run-gpu-memory-above-1", "eval", RUN + ["--gpu-memory-utilization", "1.5"]),
    ("run-max-model-len-zero", "eval", RUN + ["--max-model-len", "0"]),
    ("run-chunk-size-zero", "eval", RUN + ["--chunk-size", "0"]),
    ("run-max-concurrency-zero", "eval", RUN + ["--max-concurrency", "0"]),
    ("run-max-retries-negative", "eval", RUN + ["--max-retries", "-1"]),
    ("run-request-timeout-zero", "eval", RUN + ["--request-timeout", "0"]),
    ("run-request-timeout-nan", "eval", RUN + ["--request-timeout", "nan"]),
    ("run-retry-backoff-negative", "eval", RUN + ["--retry-backoff", "-1"]),
    ("run-grading-timeout-nan", "eval", RUN + ["--grading-timeout", "nan"]),
    ("run-grading-timeout-zero", "eval", RUN + ["--grading-timeout", "0"]),
    ("run-grading-workers-zero", "eval", RUN + ["--grading-workers", "0"]),
    ("run-out-existing-file", "eval", RUN + ["--out", "{file}"]),
    ("run-out-under-a-file", "eval", RUN + ["--out", "{file}/child"]),
    ("run-protocol-unknown", "eval", RUN + ["--protocol", "nosuch"]),
    ("run-phases-unknown", "eval", RUN + ["--phases", "nosuch"]),
    ("run-benchmark-unknown", "eval", RUN + ["--benchmarks", "nosuch"]),
    ("run-benchmarks-empty", "eval", RUN + ["--benchmarks", ","]),
    ("run-benchmark-twice", "eval", RUN + ["--benchmarks", "math500,math500"]),
    ("run-openai-without-base-url", "eval", RUN + ["--backend", "openai"]),
    ("run-extra-body-not-json", "eval", RUN + ["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
                                               "--extra-body", "{not json"]),
    ("run-extra-body-not-object", "eval", RUN + ["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
                                                 "--extra-body", "[1]"]),
    ("run-base-url-not-http", "eval", RUN + ["--backend", "openai", "--base-url", "ftp://127.0.0.1/v1"]),
    ("run-template-missing-file", "eval", RUN + ["--template", "{base}/no_such_template.txt"]),
    ("run-model-missing-dir", "eval", RUN + ["--model", "{base}/no_such_model"]),
    ("run-model-dir-not-checkpoint", "eval", RUN + ["--model", "{empty}"]),
    ("run-missing-model", "eval", ["run", "--benchmarks", "math500", "--out", "{base}/x"]),
    ("run-prompt-mode-unknown", "eval", RUN + ["--prompt-mode", "bogus"]),
    ("run-backend-unknown", "eval", RUN + ["--backend", "bogus"]),
    ("run-dtype-unknown", "eval", RUN + ["--dtype", "float7"]),
    ("run-unknown-option", "eval", RUN + ["--bogus"]),
    # ---------------------------------------------------------------- dsdr-eval score
    ("score-timeout-nan", "eval", SCORE + ["--timeout", "nan"]),
    ("score-timeout-inf", "eval", SCORE + ["--timeout", "inf"]),
    ("score-timeout-zero", "eval", SCORE + ["--timeout", "0"]),
    ("score-timeout-negative", "eval", SCORE + ["--timeout", "-1"]),
    ("score-timeout-word", "eval", SCORE + ["--timeout", "abc"]),
    ("score-workers-zero", "eval", SCORE + ["--workers", "0"]),
    ("score-bootstrap-negative", "eval", SCORE + ["--bootstrap", "-1"]),
    ("score-seed-negative", "eval", SCORE + ["--seed", "-1"]),
    ("score-out-existing-file", "eval", SCORE + ["--out", "{file}"]),
    ("score-out-under-a-file", "eval", SCORE + ["--out", "{file}/child"]),
    ("score-path-missing", "eval", ["score", "{base}/nothing_here.jsonl", "--out", "{base}/o"]),
    ("score-file-without-out", "eval", ["score", "{samples}"]),
    ("score-dir-without-samples", "eval", ["score", "{empty}"]),
    ("score-no-path", "eval", ["score"]),
    # ---------------------------------------------------------------- dsdr-eval diversity
    ("diversity-batch-size-zero", "eval", DIVERSITY + ["--batch-size", "0"]),
    ("diversity-batch-size-negative", "eval", DIVERSITY + ["--batch-size", "-5"]),
    ("diversity-threshold-nan", "eval", DIVERSITY + ["--threshold", "nan"]),
    ("diversity-threshold-inf", "eval", DIVERSITY + ["--threshold", "inf"]),
    ("diversity-threshold-above-1", "eval", DIVERSITY + ["--threshold", "2"]),
    ("diversity-partition-unknown", "eval", DIVERSITY + ["--partition", "bogus"]),
    ("diversity-judge-option-without-judge", "eval", DIVERSITY + ["--judge-model", "m"]),
    ("diversity-concurrency-zero", "eval", DIVERSITY + ["--partition", "judge", "--judge-model", "m",
                                                        "--concurrency", "0"]),
    ("diversity-run-missing", "eval", ["diversity", "{base}/no_such_run"]),
    ("diversity-run-not-graded", "eval", ["diversity", "{samples_only}"]),
    ("diversity-run-is-file", "eval", ["diversity", "{file}"]),
    # ---------------------------------------------------------------- dsdr-eval judge
    ("judge-concurrency-zero", "eval", JUDGE + ["--concurrency", "0"]),
    ("judge-max-retries-negative", "eval", JUDGE + ["--max-retries", "-1"]),
    ("judge-request-timeout-zero", "eval", JUDGE + ["--request-timeout", "0"]),
    ("judge-request-timeout-nan", "eval", JUDGE + ["--request-timeout", "nan"]),
    ("judge-backoff-negative", "eval", JUDGE + ["--backoff-base", "-1"]),
    ("judge-backoff-nan", "eval", JUDGE + ["--backoff-base", "nan"]),
    ("judge-limit-zero", "eval", JUDGE + ["--limit", "0"]),
    ("judge-max-rollouts-zero", "eval", JUDGE + ["--max-rollouts", "0"]),
    ("judge-temperature-nan", "eval", JUDGE + ["--judge-temperature", "nan"]),
    ("judge-temperature-negative", "eval", JUDGE + ["--judge-temperature", "-1"]),
    ("judge-max-tokens-zero", "eval", JUDGE + ["--judge-max-tokens", "0"]),
    ("judge-max-rollout-chars-zero", "eval", JUDGE + ["--max-rollout-chars", "0"]),
    ("judge-max-prompt-chars-zero", "eval", JUDGE + ["--max-prompt-chars", "0"]),
    ("judge-benchmark-unknown", "eval", JUDGE + ["--benchmarks", "nosuch"]),
    ("judge-base-url-not-http", "eval", JUDGE + ["--judge-base-url", "ftp://x/v1"]),
    ("judge-run-missing", "eval", ["judge", "{base}/no_such_run", "--judge-model", "m"]),
    ("judge-missing-model", "eval", ["judge", "{run}"]),
    ("judge-correct-only-ungraded", "eval", ["judge", "{samples_only}", "--judge-model", "m",
                                             "--judge-base-url", "http://127.0.0.1:9/v1", "--correct-only"]),
    # ---------------------------------------------------------------- dsdr-eval report
    ("report-digits-negative", "eval", REPORT + ["--digits", "-1"]),
    ("report-digits-too-many", "eval", REPORT + ["--digits", "9"]),
    ("report-smoothing-one", "eval", REPORT + ["--smoothing", "1"]),
    ("report-smoothing-nan", "eval", REPORT + ["--smoothing", "nan"]),
    ("report-bootstrap-negative", "eval", REPORT + ["--bootstrap", "-1"]),
    ("report-seed-negative", "eval", REPORT + ["--seed", "-1"]),
    ("report-out-existing-file", "eval", REPORT[:2] + ["--out", "{file}"]),
    ("report-out-under-a-file", "eval", REPORT[:2] + ["--out", "{file}/child"]),
    ("report-avg-metric-unknown", "eval", REPORT + ["--avg-metric", "bogus"]),
    ("report-reference-unknown", "eval", REPORT + ["--reference", "bogus"]),
    ("report-run-missing", "eval", ["report", "{base}/no_such_run", "--out", "{base}/r"]),
    ("report-missing-out", "eval", ["report", "{run}"]),
    ("report-labels-mismatch", "eval", REPORT + ["--label", "a", "--label", "b"]),
    ("report-nothing-to-report", "eval", ["report", "--out", "{base}/r"]),
    ("report-train-missing", "eval", REPORT + ["--train", "{base}/no_such_train"]),
    # ---------------------------------------------------------------- dsdr-train
    ("train-save-every-negative", "train", TRAIN + ["save_every=-1"]),
    ("train-keep-last-negative", "train", TRAIN + ["keep_last=-1"]),
    ("train-val-every-negative", "train", TRAIN + ["val_every=-1"]),
    ("train-warmup-negative", "train", TRAIN + ["warmup_steps=-1"]),
    ("train-lr-nan", "train", TRAIN + ["lr=nan"]),
    ("train-lr-inf", "train", TRAIN + ["lr=inf"]),
    ("train-temperature-nan", "train", TRAIN + ["temperature=nan"]),
    ("train-top-p-nan", "train", TRAIN + ["top_p=nan"]),
    ("train-weight-decay-nan", "train", TRAIN + ["weight_decay=nan"]),
    ("train-max-grad-norm-negative", "train", TRAIN + ["max_grad_norm=-1"]),
    ("train-adam-beta1-above-1", "train", TRAIN + ["adam_beta1=1.5"]),
    ("train-total-steps-zero", "train", TRAIN + ["total_steps=0"]),
    ("train-group-size-one", "train", TRAIN + ["group_size=1"]),
    ("train-max-prompt-length-zero", "train", TRAIN + ["max_prompt_length=0"]),
    ("train-generation-batch-zero", "train", TRAIN + ["generation_batch_size=0"]),
    ("train-grade-timeout-zero", "train", TRAIN + ["grading_timeout_s=0"]),
    ("train-time-limit-negative", "train", TRAIN + ["time_limit_s=-1"]),
    ("train-max-train-examples-zero", "train", TRAIN + ["max_train_examples=0"]),
    ("train-val-n-zero", "train", TRAIN + ["val_n=0"]),
    ("train-vllm-memory-zero", "train", TRAIN + ["vllm_gpu_memory_utilization=0"]),
    ("train-unknown-key", "train", TRAIN + ["nosuchkey=1"]),
    ("train-seed-word", "train", TRAIN + ["seed=abc"]),
    ("train-override-without-equals", "train", TRAIN + ["noequals"]),
    ("train-algo-unknown", "train", TRAIN + ["--algo", "bogus"]),
    ("train-config-missing", "train", TRAIN + ["--config", "{base}/no_such.yaml"]),
    ("train-resume-without-out", "train", ["--resume"]),
    ("train-missing-model", "train", ["--train-data", "{train_data}", "--out", "{base}/t"]),
    ("train-unknown-option", "train", TRAIN + ["--bogus"]),
    # ---------------------------------------------------------------- dsdr-dashboard
    ("dashboard-port-too-big", "dashboard", ["--port", "99999"]),
    ("dashboard-port-negative", "dashboard", ["--port", "-1"]),
    ("dashboard-port-zero", "dashboard", ["--port", "0"]),
    ("dashboard-port-word", "dashboard", ["--port", "abc"]),
    ("dashboard-host-empty", "dashboard", ["--host", ""]),
    ("dashboard-unknown-option", "dashboard", ["--bogus"]),
]


def _program(name: str) -> Callable[[list[str]], int]:
    if name == "eval":
        from dsdr_eval.cli import main
    elif name == "train":
        from dsdr_train.cli import main
    else:
        from dashboards.launch import main
    return main


def _argv(template: list[str], world: dict[str, Path], data_dir: Path) -> list[str]:
    values = {key: str(value) for key, value in world.items()} | {"data_dir": str(data_dir)}
    argv = []
    for part in template:
        for key, value in values.items():
            part = part.replace("{" + key + "}", value)
        argv.append(part)
    return argv


def test_enough_cases_for_every_program_and_subcommand():
    assert len(CASES) >= 85 and len({case[0] for case in CASES}) == len(CASES)
    covered = {(program, argv[0] if program == "eval" and argv and not argv[0].startswith("-") else None)
               for _, program, argv in CASES}
    assert {("eval", c) for c in ("run", "score", "diversity", "judge", "report")} <= covered
    assert {("train", None), ("dashboard", None)} <= covered


@pytest.mark.parametrize("case_id,program,template", CASES, ids=[c[0] for c in CASES])
def test_bad_argument_is_one_line_and_exit_2(case_id, program, template, world, data_dir, tripwires):
    code, _, err = invoke(_program(program), _argv(template, world, data_dir))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"{case_id}: exit {code!r}; stderr: {err[-600:]}"
    assert "Traceback" not in err
    assert len(lines) == 1 and "error" in lines[0], f"{case_id}: expected one error line, got {lines}"


def test_train_overrides_may_surround_options(world, data_dir, tripwires):
    """`dsdr-train k=v --out X k2=v` is a valid command line (it used to be refused)."""
    argv = ["--model", "TRAIN-MODEL", "--train-data", str(world["train_data"]), "total_steps=3",
            "--out", str(world["base"] / "t2"), "save_every=1"]
    code, _, err = invoke(_program("train"), argv)
    assert code == "accepted (train: resolved the policy model)", err


def test_run_validates_before_resolving_the_model(world, data_dir, tripwires, monkeypatch):
    """A bad sampling value is refused before the model is even resolved (let alone loaded)."""
    import dsdr_eval.models

    monkeypatch.setattr(dsdr_eval.models, "resolve_model", _trip("run: resolved the model"))
    code, _, err = invoke(_program("eval"), _argv(RUN + ["--temperature", "nan"], world, data_dir))
    assert code == 2 and "--temperature" in err
