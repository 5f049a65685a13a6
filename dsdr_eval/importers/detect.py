"""Which tool wrote a result file or directory (``dsdr-eval import --from auto``), told from its content.

A file is recognised by the keys of its first JSON line (a parquet file is lighteval's details), a
directory by the files each tool writes into its output directory. ``check`` refuses an explicit
``--from`` that another format fits better, saying which one does, instead of failing later on a
missing field of the wrong format.
"""

from __future__ import annotations

import json
from pathlib import Path

from dsdr_eval.errors import DsdrError
from dsdr_eval.importers import evalscope, lighteval, lm_eval, nemo_skills, qwen_math, verl

AUTO = "auto"
_FIRST_LINE_BYTES = 1 << 24  # a first line longer than 16 MB is read as far as that only
# a format's signature: every key in one of its key sets on the first line
_SIGNATURES: tuple[tuple[str, tuple[frozenset[str], ...]], ...] = (
    (lm_eval.TOOL, (frozenset({"doc_id", "resps"}), frozenset({"doc_id", "doc", "target"}))),
    (qwen_math.TOOL, (frozenset({"idx", "question", "code"}), frozenset({"idx", "gt", "code"}))),
    (verl.TOOL, (frozenset({"input", "output", "gts"}), frozenset({"input", "output", "score", "step"}))),
    ("openai-batch", (frozenset({"custom_id", "response"}), frozenset({"custom_id", "error"}))),
    (evalscope.TOOL, evalscope.EARLY_KEYS + evalscope.CURRENT_KEYS),
    (nemo_skills.TOOL, nemo_skills.SIGNATURES),
)
_BATCH_INPUT = frozenset({"custom_id", "body"})
_EVALSCOPE_PREDICTION = frozenset({"index", "model_output"})


def _first_keys(path: Path) -> set[str] | None:
    """The keys of the first non-empty line when it is a JSON object; None otherwise."""
    try:
        with path.open("rb") as fh:
            for raw in iter(lambda: fh.readline(_FIRST_LINE_BYTES), b""):
                if raw.strip():
                    value = json.loads(raw.decode("utf-8-sig"))
                    return set(value) if isinstance(value, dict) else None
    except (OSError, ValueError, RecursionError):
        return None
    return None


def file_format(path: Path) -> str | None:
    """The tool whose format ``path`` has; None when no tool's signature fits (plain JSONL or unknown)."""
    if path.suffix == ".parquet":
        return lighteval.TOOL
    keys = _first_keys(path)
    if not keys:
        return None
    for tool, signatures in _SIGNATURES:
        if any(signature <= keys for signature in signatures):
            return tool
    return None


def directory_files(path: Path) -> dict[str, list[Path]]:
    """Per tool, the result files of an output directory (searched below it, as each tool nests them):
    lm-eval ``samples_<task>_<date>.jsonl``, lighteval ``details_<task>_<date>.parquet``, Qwen
    ``<data_name>/<name>.jsonl`` in math_eval.py's naming, verl ``<step>.jsonl``, evalscope
    ``reviews/<model>/<benchmark>_<subset>.jsonl`` (its ``predictions/`` files are not reviews), NeMo-Skills
    ``<benchmark>/output-rs<seed>.jsonl`` (``output.jsonl`` when its content is NeMo-Skills')."""
    found: dict[str, list[Path]] = {}
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        name = file.name
        tool = (lm_eval.TOOL if lm_eval.FILE_NAME.match(name) else
                lighteval.TOOL if lighteval.FILE_NAME.match(name) else
                verl.TOOL if verl.STEP_FILE.match(name) else
                evalscope.TOOL if name.endswith(".jsonl") and file.parent.parent.name == "reviews" else
                nemo_skills.TOOL if nemo_skills.seed_of(file) is not None or (
                    name == "output.jsonl" and file_format(file) == nemo_skills.TOOL) else
                qwen_math.TOOL if name.endswith(".jsonl") and qwen_math.file_settings(name) else None)
        if tool is not None:
            found.setdefault(tool, []).append(file)
    return found


def latest_runs(files: list[Path], tool: str) -> tuple[list[Path], list[Path]]:
    """(files kept, files left out): of several lm-eval / lighteval files of one task in one directory
    (the same model evaluated again), the latest date; every other file is kept."""
    pattern = {lm_eval.TOOL: lm_eval.FILE_NAME, lighteval.TOOL: lighteval.FILE_NAME}.get(tool)
    latest: dict[tuple[Path, str], Path] = {}
    for file in files:
        match = pattern.match(file.name) if pattern else None
        key = (file.parent, match["task"]) if match else (file, "")
        if key not in latest or (match and file.name > latest[key].name):  # the date sorts as text
            latest[key] = file
    kept = sorted(latest.values())
    return kept, [file for file in files if file not in kept]


def resolve(tool: str, path: Path) -> str:
    """The format to read ``path`` as: ``tool``, or the detected one for ``auto``; DsdrError when
    nothing fits, or when ``tool`` is explicit and the content is another tool's."""
    if not path.exists():
        raise DsdrError(f"{path}: file not found")
    if not path.is_dir() and not path.is_file():  # a FIFO would block the read, /dev/zero never end
        raise DsdrError(f"{path}: not a regular file or a directory")
    if path.is_dir():
        found = directory_files(path)
        if tool != AUTO:
            if tool in found or tool == verl.TOOL or not found:
                return tool
            raise DsdrError(f"{path}: holds {_listing(found)}, not {tool} files: use --from {_best(found)}")
        if not found:
            raise DsdrError(f"{path}: no result files of lm-eval (samples_<task>_<date>.jsonl), lighteval "
                            "(details_<task>_<date>.parquet), Qwen math_eval.py (<data_name>/<split>_<prompt>_..."
                            "_seed<S>_t<T>_s<a>_e<b>.jsonl), verl (<step>.jsonl), evalscope (reviews/<model>/"
                            "<benchmark>_<subset>.jsonl) or NeMo-Skills (<benchmark>/output-rs<seed>.jsonl) in this "
                            "directory")
        if len(found) > 1:
            raise DsdrError(f"{path}: holds {_listing(found)}: say which with --from")
        return next(iter(found))
    detected = file_format(path)
    if tool == AUTO:
        if detected is None:
            raise DsdrError(f"{path}: not a result file of lm-eval, lighteval, Qwen math_eval.py, verl, evalscope "
                            "(a reviews/ file), NeMo-Skills or an OpenAI batch output" + _hint(path)
                            + "; for any other JSONL give --from jsonl and its field names")
        return detected
    if detected is not None and detected != tool and tool != "jsonl":
        raise DsdrError(f"{path}: this is {detected} output (its first line has {detected}'s keys), not {tool}: "
                        f"use --from {detected} (or --from auto)")
    return tool


def _hint(path: Path) -> str:
    """What a file that is no result file is, when its keys say: a batch input, an evalscope prediction."""
    keys = _first_keys(path) or set()
    if _BATCH_INPUT <= keys:
        return " (it is a batch *input* file: give the output file, with --batch-input this one)"
    if _EVALSCOPE_PREDICTION <= keys:
        return (" (it is an evalscope *prediction* file, without verdicts or golds: give the file of the same "
                "name under reviews/)")
    return ""


def _listing(found: dict[str, list[Path]]) -> str:
    return ", ".join(f"{len(files)} {tool} file{'s' if len(files) > 1 else ''}" for tool, files in found.items())


def _best(found: dict[str, list[Path]]) -> str:
    return max(found, key=lambda tool: len(found[tool]))


