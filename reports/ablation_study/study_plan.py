"""A registered study file (design 3 on: reports/ablation_study/design3/study.yaml) read for run.sh.

A registered study.yaml holds the whole pre-registration -- task, arms, seeds, evaluation, endpoints,
claims, analysis -- and the trainer's config under ``train:``. Designs 1 and 2's study.yaml files are a
trainer config alone (their knobs in study.env); run.sh uses this helper only for a file with ``train:``.

    python reports/ablation_study/study_plan.py STUDY.yaml --shell             # run.sh's knob defaults
    python reports/ablation_study/study_plan.py STUDY.yaml --train-config OUT  # the trainer's config file
    python reports/ablation_study/study_plan.py STUDY.yaml --stop              # eval stop strings, NUL-separated
    python reports/ablation_study/study_plan.py STUDY.yaml --guard RUNS [--allow-draft]

``--guard`` is the registration check run.sh makes before any unit of a registered study: the file is
tracked by git with no uncommitted change, its ``status`` is ``registered`` (``--allow-draft`` lets a
draft run: smoke tests), and -- from the second start on -- its bytes are those recorded in
RUNS/registration.json at the first start (commit and sha256). Nothing in the registration changes after
the first unit starts; a changed file stops the study with exit code 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

# study.yaml key path -> run.sh knob (their meaning: run.sh's header)
KNOBS = {("task", "design"): "DESIGN", ("task", "n_train"): "N_TRAIN", ("task", "n_heldout"): "N_HELDOUT",
         ("evaluation", "problems"): "LIMIT", ("evaluation", "n"): "N", ("evaluation", "top_p"): "EVAL_TOP_P",
         ("evaluation", "max_tokens"): "MAXTOK", ("arms",): "ARMS", ("main_arms",): "MAIN_ARMS",
         ("seeds", "main"): "SEEDS_MAIN", ("seeds", "ablation"): "SEEDS_ABL", ("runner", "commit"): "COMMIT",
         ("runner", "jobs"): "JOBS"}
REQUIRED = ("status", "task", "arms", "main_arms", "seeds", "evaluation", "claims", "analysis", "train")


class StudyError(ValueError):
    pass


def load(path: Path) -> dict:
    try:
        study = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise StudyError(f"{path}: cannot read ({exc})") from None
    if not isinstance(study, dict):
        raise StudyError(f"{path}: not a mapping")
    for key in REQUIRED:
        if key not in study:
            raise StudyError(f"{path}:{key}: missing")
    if study["evaluation"].get("max_tokens") != study["train"].get("max_response_length"):
        raise StudyError(f"{path}:evaluation.max_tokens: differs from train.max_response_length")
    if study["evaluation"].get("stop") != study["train"].get("stop"):
        raise StudyError(f"{path}:evaluation.stop: differs from train.stop")
    return study


def _get(study: dict, keys: tuple[str, ...]):
    value = study
    for k in keys:
        value = value[k]
    return value


SMOKE_KNOBS = ("DESIGN", "N_TRAIN", "N_HELDOUT", "EVAL_TOP_P")


def shell(study: dict, smoke: bool = False) -> str:
    """``: "${KNOB:=value}"`` lines: run.sh's defaults, the environment still wins (as study.env); with
    ``smoke`` only the task's and the sampling's (a smoke run keeps its own arms, seeds and sizes)."""
    lines = []
    for keys, knob in KNOBS.items():
        if smoke and knob not in SMOKE_KNOBS:
            continue
        value = _get(study, keys)
        if isinstance(value, bool):
            value = "1" if value else "0"
        value = " ".join(map(str, value)) if isinstance(value, list) else str(value)
        # run.sh evals these lines: a value is plain words or nothing runs
        if not re.fullmatch(r"[\w .@/+-]*", value):
            raise StudyError(f"{'.'.join(keys)}: {value!r} is not plain words (letters, digits, space, . @ / + - _)")
        lines.append(f': "${{{knob}:={value}}}"')
    return "\n".join(lines) + "\n"


def guard(path: Path, runs: Path, allow_draft: bool) -> str:
    """The registration check (module docstring); returns a one-line description."""
    study = load(path)
    if study["status"] != "registered" and not allow_draft:
        raise StudyError(f"{path}:status: {study['status']!r}, not 'registered': commit the registration first")
    git = ["git", "-C", str(path.parent)]
    tracked = subprocess.run([*git, "ls-files", "--error-unmatch", path.name], capture_output=True).returncode == 0
    clean = tracked and subprocess.run([*git, "diff", "--quiet", "HEAD", "--", path.name]).returncode == 0
    if not clean and not allow_draft:
        raise StudyError(f"{path}: not committed as it is (the registration is the committed file)")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    record = runs / "registration.json"
    if record.exists():
        first = json.loads(record.read_text())
        if first.get("sha256") != digest:
            raise StudyError(f"{path}: changed since the study started (registered at commit {first.get('commit')}, "
                             f"sha256 {first.get('sha256', '')[:12]}; now {digest[:12]}): the registration is frozen")
        return f"registration unchanged since the first start (commit {first.get('commit')})"
    commit = subprocess.run([*git, "log", "-1", "--format=%H", "--", path.name], capture_output=True,
                            text=True).stdout.strip() or None
    runs.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"study": str(path), "commit": commit, "sha256": digest, "status": study["status"],
                                  "clean": clean}, indent=1) + "\n")
    return f"registration recorded: commit {commit}, sha256 {digest[:12]}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("study", type=Path)
    p.add_argument("--shell", action="store_true")
    p.add_argument("--smoke", action="store_true", help="with --shell: the knobs a smoke run takes")
    p.add_argument("--train-config", type=Path)
    p.add_argument("--stop", action="store_true")
    p.add_argument("--guard", type=Path, metavar="RUNS")
    p.add_argument("--allow-draft", action="store_true")
    args = p.parse_args(argv)
    try:
        study = load(args.study)
        if args.guard:
            print(guard(args.study, args.guard, args.allow_draft), file=sys.stderr)
        if args.shell:
            sys.stdout.write(shell(study, args.smoke))
        if args.stop:
            sys.stdout.write("".join(f"{s}\0" for s in study["evaluation"].get("stop") or []))
        if args.train_config:
            args.train_config.parent.mkdir(parents=True, exist_ok=True)
            args.train_config.write_text(yaml.safe_dump(study["train"], sort_keys=False))
    except StudyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
