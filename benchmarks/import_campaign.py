"""Import campaign (issues 21 / 24): real-file cases of ``dsdr-eval import``, each classified.

Each case builds a small source file in its tool's exact schema (``tests/helpers/import_sources.py``), runs
``dsdr-eval import`` in-process and prints one row: the case, the exit code, "traceback" when an
exception escaped, and the figure the case is about (the gold kept, the settings read, the problems
matched, the first line of stderr). Run before and after a change to compare:

    PYTHONPATH=.:tests DSDR_DATA_DIR=... python benchmarks/import_campaign.py

Measured on branch i21-import (33 cases; before = 9aa0f75, after = this change):
tracebacks 5 -> 0 (verl step list / object, a '².jsonl' step file, lighteval metric map, timestamp out of
range); numeric golds corrupted 10 -> 0 (1e400 -> 'inf', NaN -> 'nan', 12345678901234567890.0 ->
'1.2345678901234567e+19' in jsonl, lm-eval target and verl gts, incl. gts [1e400]; NaN is now refused
or replaced by the documented fallback field); one empty Qwen gt: file lost (exit 2) -> imported (the
registry's gold); fork name tokens: temperature/seed unknown -> 0.0 / 0; aime25 '17_b': 2/3 matched,
silent -> 3/3, printed; gsm8k gold: the rationale -> '18'; lm-eval 0.4.0 file: refused -> imported
with its prompt; ToRA: "0 carry" -> "no verdict field"; directory: "file not found" -> imported;
wrong --from: "missing required field 'filter'" -> "this is qwen-math output ... use --from
qwen-math"; no --from: usage error -> detected; openai non-object choices: exit 0 with empty
completions -> one-line error; kill -9 between the files: samples.jsonl alone and re-import refused
-> never samples.jsonl without config.json, re-import completes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import import_sources as src  # noqa: E402
from dsdr_eval.cli import main  # noqa: E402

DATA = Path(os.environ.get("DSDR_DATA_DIR", "data/benchmarks"))


def run(*argv: Any) -> tuple[str, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = str(main(["import", *map(str, argv)]))
        except BaseException as exc:  # noqa: BLE001 -- a traceback is what we count
            code = f"traceback {type(exc).__name__}"
            traceback.print_exc(file=err)
    return code, out.getvalue(), err.getvalue()


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def put(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in items), encoding="utf-8")
    return path


def samples(run_dir: Path) -> list[dict[str, Any]]:
    return rows(run_dir / "samples.jsonl") if (run_dir / "samples.jsonl").exists() else []


def first_err(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    return (lines[-1] if lines and "Traceback" in err else lines[0] if lines else "")[:110]


CASES: list[tuple[str, Callable[[Path], str]]] = []


def case(name: str):
    def wrap(fn: Callable[[Path], str]) -> Callable[[Path], str]:
        CASES.append((name, fn))
        return fn
    return wrap


@case("qwen: one empty gt among 3 lines")
def _(tmp: Path) -> str:
    path = src.write_qwen_math(tmp / "o", DATA)
    items = rows(path)
    items[1].update(gt="", answer="\\text{east}")
    put(path, items)
    code, out, err = run("--from", "qwen-math", path, "--out", tmp / "r")
    return f"{code} | {len(samples(tmp / 'r'))} samples | {first_err(err)}"


@case("qwen: settings tokens in the file name")
def _(tmp: Path) -> str:
    path = src.write_qwen_math(tmp / "o", DATA)
    other = path.with_name("test_qwen25-math-cot_-1_seed0_t0.0_top_k8_enable_thinkingFalse_s0_e-1.jsonl")
    path.rename(other)
    code, out, err = run("--from", "qwen-math", other, "--out", tmp / "r")
    s = samples(tmp / "r")
    return f"{code} | temperature={s[0].get('temperature') if s else None} seed={s[0].get('seed') if s else None}"


@case("lm-eval aime25: registry 17_{b} vs source 17_b")
def _(tmp: Path) -> str:
    path = src.write_lm_eval(tmp / "lm", DATA, repeats=1)
    aime = [json.loads(line) for line in (DATA / "aime25.jsonl").read_text().splitlines()][:3]
    items = rows(path)
    for item, doc in zip(items, aime):
        text = doc["problem"].replace("_{b}", "_b").replace("  ", " ")
        item.update(doc={"problem": text, "answer": doc["answer"]}, target=doc["answer"])
    put(path, items)
    code, out, err = run("--from", "lm-eval", path, "--out", tmp / "r", "--benchmark", "aime25", "--data-dir", DATA)
    reg = json.loads((tmp / "r" / "config.json").read_text())["benchmarks"][0].get("registry") \
        if (tmp / "r" / "config.json").exists() else None
    shown = "matched" in out + err
    return f"{code} | matched {reg and reg['n_matched']}/3 | on terminal: {shown}"


@case("lm-eval gsm8k: target is the rationale")
def _(tmp: Path) -> str:
    path = src.write_lm_eval(tmp / "lm", DATA, repeats=1)
    items = rows(path)
    items[0]["target"] = "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n#### 18"
    put(path, items)
    code, out, err = run("--from", "lm-eval", path, "--out", tmp / "r")
    s = samples(tmp / "r")
    return f"{code} | gold={s[0].get('source_gold', s[0]['gold']) if s else None!r:.40}"


@case("lm-eval 0.4.0: no filter/metrics keys, arguments a list")
def _(tmp: Path) -> str:
    path = src.write_lm_eval(tmp / "lm", DATA, repeats=1)
    items = rows(path)
    for item in items:
        args = item["arguments"]["gen_args_0"]
        item["arguments"] = [[args["arg_0"], args["arg_1"]]]
        for key in ("filter", "metrics", "doc_hash", "prompt_hash", "target_hash"):
            item.pop(key)
    put(path, items)
    code, out, err = run("--from", "lm-eval", path, "--out", tmp / "r")
    s = samples(tmp / "r")
    return f"{code} | prompt={'set' if s and s[0].get('prompt') else None} | {first_err(err)}"


@case("ToRA-style file without score")
def _(tmp: Path) -> str:
    path = src.write_qwen_math(tmp / "o", DATA)
    items = rows(path)
    for item in items:
        item.pop("score")
    put(path, items)
    code, out, err = run("--from", "qwen-math", path, "--out", tmp / "r")
    return f"{code} | {[line for line in out.splitlines() if 'verdict' in line][0][-70:]}"


@case("directory as PATH (lm-eval output dir)")
def _(tmp: Path) -> str:
    src.write_lm_eval(tmp / "lm" / "model", DATA, repeats=1)
    code, out, err = run("--from", "lm-eval", tmp / "lm", "--out", tmp / "r")
    return f"{code} | {len(samples(tmp / 'r'))} samples | {first_err(err)}"


@case("wrong --from (qwen file as lm-eval)")
def _(tmp: Path) -> str:
    path = src.write_qwen_math(tmp / "o", DATA)
    code, out, err = run("--from", "lm-eval", path, "--out", tmp / "r")
    return f"{code} | {first_err(err)}"


@case("no --from (auto)")
def _(tmp: Path) -> str:
    path = src.write_qwen_math(tmp / "o", DATA)
    code, out, err = run(path, "--out", tmp / "r")
    return f"{code} | {len(samples(tmp / 'r'))} samples | {first_err(err)}"


def _numeric(tmp: Path, tool: str, literal: str) -> str:
    if tool == "jsonl":
        path = tmp / "m.jsonl"
        path.write_text('{"id": 1, "answer": %s, "completion": "\\\\boxed{1}"}\n' % literal)
    elif tool == "lm-eval":
        path = src.write_lm_eval(tmp / "lm", DATA, repeats=1)
        text = path.read_text().splitlines()
        first = json.loads(text[0])
        first["target"] = "@@"
        text[0] = json.dumps(first).replace('"@@"', literal)
        path.write_text("\n".join(text) + "\n")
    else:
        path = src.write_verl(tmp / "v", DATA)
        text = path.read_text().splitlines()
        text = [line.replace(json.dumps(json.loads(line)["gts"]), literal, 1) for line in text[:3]] + text[3:]
        path.write_text("\n".join(text) + "\n")
    code, out, err = run("--from", tool, path, "--out", tmp / "r")
    s = samples(tmp / "r")
    return f"{code} | gold={s[0].get('source_gold', s[0]['gold']) if s else None!r} | {first_err(err)}"


for _tool in ("jsonl", "lm-eval", "verl"):
    for _lit in ("1e400", "NaN", "12345678901234567890.0", "[1e400]" if _tool == "verl" else "-0.0"):
        CASES.append((f"{_tool}: numeric gold {_lit}", lambda tmp, t=_tool, v=_lit: _numeric(tmp, t, v)))


@case("verl: step is a list")
def _(tmp: Path) -> str:
    path = src.write_verl(tmp / "v", DATA)
    items = rows(path)
    items[0]["step"] = [1]
    put(path, items)
    code, out, err = run("--from", "verl", path, "--out", tmp / "r")
    return f"{code} | {first_err(err)}"


@case("verl: step is an object")
def _(tmp: Path) -> str:
    path = src.write_verl(tmp / "v", DATA)
    items = rows(path)
    items[1]["step"] = {"a": 1}
    put(path, items)
    code, out, err = run("--from", "verl", path, "--out", tmp / "r")
    return f"{code} | {first_err(err)}"


@case("verl: directory with a file named ².jsonl")
def _(tmp: Path) -> str:
    path = src.write_verl(tmp / "v", DATA)
    path.rename(tmp / "v" / "².jsonl")
    code, out, err = run("--from", "verl", tmp / "v", "--out", tmp / "r")
    return f"{code} | {first_err(err)}"


def _lighteval(tmp: Path, mutate: Callable[[Any], Any]) -> str:
    import pyarrow.parquet as pq

    path = src.write_lighteval(tmp / "le", DATA)
    table = mutate(pq.read_table(path))
    pq.write_table(table, path)
    code, out, err = run("--from", "lighteval", path, "--out", tmp / "r")
    return f"{code} | {first_err(err)}"


@case("lighteval: metric stored as a parquet map")
def _(tmp: Path) -> str:
    import pyarrow as pa

    def mutate(table):
        values = [list(m.items()) for m in table.column("metric").to_pylist()]
        column = pa.array(values, type=pa.map_(pa.string(), pa.float64()))
        return table.set_column(table.schema.get_field_index("metric"), "metric", column)
    return _lighteval(tmp, mutate)


@case("lighteval: timestamp out of range")
def _(tmp: Path) -> str:
    import pyarrow as pa

    def mutate(table):
        column = pa.array([2**62, 0, 0], type=pa.timestamp("ns")).cast(pa.timestamp("s"), safe=False)
        column = pa.array([10**15, 0, 0], type=pa.int64()).cast(pa.timestamp("s"))
        return table.append_column("created", column)
    return _lighteval(tmp, mutate)


@case("openai-batch: choices that are not objects")
def _(tmp: Path) -> str:
    inputs, outputs = src.write_openai_batch(tmp / "b", DATA)
    items = rows(outputs)
    items[0]["response"]["body"]["choices"] = ["hello", 3]
    put(outputs, items)
    code, out, err = run("--from", "openai-batch", outputs, "--batch-input", inputs, "--benchmark", "math500",
                         "--data-dir", DATA, "--out", tmp / "r")
    s = samples(tmp / "r")
    return f"{code} | completions of line 1: {[x['completion'][:10] for x in s[:2]]} | {first_err(err)}"


def _kill(tmp: Path, at: int) -> str:
    """kill -9 the import at its ``at``-th os.replace (each file's temp -> final, each move into place)."""
    import subprocess

    path = src.write_qwen_math(tmp / "o", DATA)
    script = ("import os, signal, sys\n"
              "real = os.replace\n"
              "calls = []\n"
              "def replace(a, b):\n"
              f"    if len(calls) == {at - 1}: os.kill(os.getpid(), signal.SIGKILL)\n"
              "    calls.append(b); real(a, b)\n"
              "os.replace = replace\n"
              "from dsdr_eval.cli import main\n"
              "sys.exit(main(sys.argv[1:]))\n")
    done = subprocess.run([sys.executable, "-c", script, "import", "--from", "qwen-math", str(path), "--out",
                           str(tmp / "r")], capture_output=True)
    left = sorted(p.name for p in (tmp / "r").iterdir()) if (tmp / "r").exists() else []
    code, out, err = run("--from", "qwen-math", path, "--out", tmp / "r")
    after = sorted(p.name for p in (tmp / "r").iterdir())
    return f"rc {done.returncode}, left {left} | re-import {code} {first_err(err)[:40]} | then {after}"


for _at in (1, 2, 3, 4):
    CASES.append((f"kill -9 at the import's write #{_at}, then re-import", lambda tmp, a=_at: _kill(tmp, a)))


def main_() -> None:
    for name, fn in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                result = fn(Path(tmp))
            except BaseException as exc:  # noqa: BLE001
                result = f"campaign error {type(exc).__name__}: {exc}"
        print(f"{name:58s} | {result}")


if __name__ == "__main__":
    main_()
