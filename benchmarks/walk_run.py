"""The walk of ``dsdr-eval run``'s arguments through the code (issue 32), measured on a real run.

Runs ``dsdr_eval.cli.main(["run", ...])`` on two math500 problems with a fake engine (tests/helpers/fake_engine.py:
every rollout answers ``\\boxed{1}``) under ``sys.setprofile`` and lists the dsdr_eval functions in order of their
first call. Two readings of "a stop":

* ``args`` (default): a function given the run's arguments or what they are resolved into (the argparse
  namespace, ``RunOptions``, ``RunPlan``, ``Resume``): the path the options take;
* ``leaves``: every function of the run pipeline (dsdr_eval/cli/run.py, dsdr_eval/run/, dsdr_eval/api/)
  and every dsdr_eval function one of them calls directly (its leaf calls).

Comprehensions, lambdas, nested functions and generated dataclass methods are never stops. A return is
a stop in a file already visited that is not the previous stop's file.

    PYTHONPATH=$PWD python benchmarks/walk_run.py [--walk args|leaves] [--list]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "dsdr_eval"
sys.path.insert(0, str(REPO / "tests"))
from helpers.fake_engine import BoxedOne  # noqa: E402

PIPELINE = ("cli/run.py", "run/", "api/")
CARRIERS = {"Namespace", "RunOptions", "RunPlan", "Resume"}


def _module(filename: str) -> str | None:
    try:
        return str(Path(filename).resolve().relative_to(ROOT))
    except ValueError:
        return None


def _in_pipeline(module: str | None) -> bool:
    return module is not None and any(module == p or (p.endswith("/") and module.startswith(p)) for p in PIPELINE)


def walk(mode: str, data_dir: str | None) -> tuple[int, list[tuple[str, str]]]:
    import dsdr_eval.run.evaluation as evaluation
    from dsdr_eval.cli import main

    evaluation.make_backend = lambda plan, options: BoxedOne(plan.backend_name)  # outside dsdr_eval: no stop
    work = Path(tempfile.mkdtemp())
    (work / "model").mkdir()
    (work / "model" / "config.json").write_text("{}")
    argv = ["run", "--model", str(work / "model"), "--benchmarks", "math500", "--protocol", "quick", "--limit", "2",
            "--n", "2", "--max-tokens", "8", "--backend", "hf", "--no-diversity", "--no-progress",
            "--grading-workers", "1", "--out", str(work / "run"), *(["--data-dir", data_dir] if data_dir else [])]
    stops: list[tuple[str, str]] = []
    seen: set[tuple[str, int]] = set()

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        module = _module(code.co_filename)
        if module is None or code.co_name.startswith("<") or "<locals>" in code.co_qualname:
            return
        if mode == "args":
            names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            if not any(type(frame.f_locals.get(n)).__name__ in CARRIERS for n in names):
                return
        elif not (_in_pipeline(module) or _in_pipeline(_module(frame.f_back.f_code.co_filename))):
            return
        if (module, code.co_firstlineno) not in seen:
            seen.add((module, code.co_firstlineno))
            stops.append((module, code.co_qualname))

    sys.setprofile(profile)
    try:
        code = main(argv)
    finally:
        sys.setprofile(None)
    return code, stops


def returns(stops: list[tuple[str, str]]) -> int:
    visited: set[str] = set()
    count, last = 0, None
    for module, _ in stops:
        count += module != last and module in visited
        visited.add(module)
        last = module
    return count


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--walk", choices=("args", "leaves"), default="args")
    parser.add_argument("--list", action="store_true", help="print every stop")
    parser.add_argument("--data-dir", default=None)
    cli = parser.parse_args()
    exit_code, stops = walk(cli.walk, cli.data_dir)
    if cli.list:
        for module, name in stops:
            print(f"  {module}: {name}")
    print(f"walk {cli.walk}: {len(stops)} stops in {len({m for m, _ in stops})} files, {returns(stops)} returns "
          f"to a file already left (run exit code {exit_code})")
