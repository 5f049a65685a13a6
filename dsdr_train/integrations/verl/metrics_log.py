"""verl's training log -> a dsdr run directory (``config.json`` + ``metrics.jsonl``), so the dashboard
shows verl runs beside the compact trainer's.

Reads either of verl's own loggers (``trainer.logger=[console,file]``):

* ``file``: the JSONL of ``verl.utils.tracking.FileLogger``, one ``{"step": N, "data": {...}}`` per step;
* ``console``: the lines ``step:N - key:value - ...`` of ``concat_dict_to_str`` (any prefix before
  ``step:``, e.g. Ray's ``(TaskRunner pid=..)``, is ignored; other lines are skipped).

Keys with the same meaning are renamed to dsdr's (:data:`KEY_MAP`; the plugin's ``dsdr/...`` keys lose
their prefix); every other key is kept as ``verl/<key>``, so nothing is lost and nothing is passed off
as a dsdr metric it is not (verl's ``critic/score/mean`` is ``math_dapo``'s +-1 score, not accuracy).

    python -m dsdr_train.integrations.verl.metrics_log LOG --out RUN_DIR [--algo dsdr] [--label NAME]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsdr_eval.errors import DsdrError
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.rundir.jsonl import jsonl_chunks

# verl key -> dsdr metrics.jsonl key (dsdr_train/stats.py), only where the definitions agree
KEY_MAP: dict[str, str] = {
    "critic/advantages/mean": "adv/mean", "critic/advantages/max": "adv/max", "critic/advantages/min": "adv/min",
    "response_length/mean": "response_length/mean", "response_length/max": "response_length/max",
    "response_length/clip_ratio": "response_length/clip_ratio",
    "actor/pg_loss": "loss/pg", "actor/dsdr_loss_local": "loss/local", "actor/kl_loss": "loss/kl",
    # verl's pg_clipfrac: tokens whose clipped loss is the larger one = dsdr's clip/frac
    "actor/pg_clipfrac": "clip/frac",
    "actor/entropy": "entropy/mean", "actor/lr": "lr",
    "timing_s/gen": "time/generate_s", "timing_s/update_actor": "time/update_s", "timing_s/step": "time/total_s",
}
PLUGIN_PREFIX = "dsdr/"  # the plugin's own metrics (group_rewards.group_metrics) are already dsdr keys
_CONSOLE = re.compile(r"(?:^|\s)step:(\d+)((?: - [^\s:][^:]*:\S+)*)\s*$")
_NUMPY_SCALAR = re.compile(r"^np\.(?:float|int|uint)\d*\((.*)\)$")


class LogFormatError(ValueError):
    """A line of the verl log that cannot be read (the message names the file and line)."""


def _number(text: str, where: str) -> float:
    text = text.strip()
    match = _NUMPY_SCALAR.match(text)
    if match:
        text = match.group(1)
    try:
        return float(text)
    except ValueError:
        raise LogFormatError(f"{where}: {text!r} is not a number") from None


def dsdr_key(key: str) -> str:
    """dsdr's name for a verl metric key (``verl/<key>`` when dsdr has no metric of that meaning)."""
    while key.startswith("actor/actor/"):  # verl's rename_dict prefixes worker metrics once more
        key = key[len("actor/"):]
    if key.startswith(PLUGIN_PREFIX):
        return key[len(PLUGIN_PREFIX):]
    return KEY_MAP.get(key, f"verl/{key}")


def read_verl_log(path: Path) -> Iterator[tuple[int, dict[str, float]]]:
    """``(step, {verl key: value})`` per logged step, from a file-logger JSONL or a console log."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            where = f"{path}:{number}"
            stripped = line.strip()
            if stripped.startswith("{"):
                try:
                    record = json.loads(stripped)
                except ValueError as exc:
                    raise LogFormatError(f"{where}: not a JSON object ({exc.msg})") from None
                if not isinstance(record, dict) or not isinstance(record.get("data"), dict) \
                        or not isinstance(record.get("step"), int):
                    raise LogFormatError(f"{where}: expected verl's file logger record {{\"step\": N, \"data\": {{...}}}}")
                values = {k: v for k, v in record["data"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
                yield record["step"], {k: float(v) for k, v in values.items()}
                continue
            match = _CONSOLE.search(stripped)
            if match is None:
                continue  # not a metrics line (verl and Ray print much else)
            values = {}
            for item in match.group(2).split(" - ")[1:]:
                key, _, value = item.partition(":")
                values[key] = _number(value, f"{where}: {key}")
            yield int(match.group(1)), values


def convert(path: Path) -> list[dict[str, Any]]:
    """dsdr ``metrics.jsonl`` rows (``{"step": N, dsdr key: value}``), one per step, in log order
    (a step logged twice keeps its last record, as a resumed verl run logs it again)."""
    rows: dict[int, dict[str, Any]] = {}
    for step, values in read_verl_log(path):
        row = {"step": step}
        for key, value in values.items():
            row[dsdr_key(key)] = None if not math.isfinite(value) else value  # JSON has no NaN or inf
        rows.pop(step, None)
        rows[step] = row
    return list(rows.values())


def write_run(rows: list[dict[str, Any]], out: Path, *, source: Path, algo: str | None, label: str | None) -> None:
    """config.json and metrics.jsonl of ``out``, through the run directory's one writer: under its writer
    lock, both files replaced together (``rundir.commit_files``: a kill leaves the old pair or the new
    one). A directory another engine trained into is refused (converting again over a conversion is fine)."""
    out.mkdir(parents=True, exist_ok=True)
    with rundir.writer_lock(out, command="dsdr_train.integrations.verl.metrics_log"):
        if (out / rundir.CONFIG).is_file() and rundir.load_config(out).get("engine") != "verl":
            raise DsdrError(f"{out}: already holds a training run that is not a verl conversion; choose another --out")
        config = {"kind": "train", "engine": "verl", "algo": algo, "label": label or out.name,
                  "source_log": source.name, "key_map": KEY_MAP,
                  "note": "converted from verl's log; keys not in key_map are kept as verl/<key>"}
        text = json.dumps(rundir.stamped_config(config), indent=2, ensure_ascii=False) + "\n"
        rundir.commit_files(out, {rundir.CONFIG: text.encode("utf-8"), rundir.TRAIN_METRICS: jsonl_chunks(rows)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="verl training log -> dsdr run directory (config.json, metrics.jsonl)")
    parser.add_argument("log", type=Path, help="verl file-logger JSONL or console log")
    parser.add_argument("--out", type=Path, required=True, help="run directory to write")
    parser.add_argument("--algo", default=None, help="algorithm name to record (e.g. dsdr)")
    parser.add_argument("--label", default=None, help="dashboard label (default: the directory name)")
    args = parser.parse_args(argv)
    try:
        if not args.log.is_file():
            raise LogFormatError(f"{args.log}: no such file")
        rows = convert(args.log)
        if not rows:
            raise LogFormatError(f"{args.log}: no verl metrics line (step:N - key:value ...) or file-logger record")
    except LogFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        write_run(rows, args.out, source=args.log, algo=args.algo, label=args.label)
    except DsdrError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(rows)} steps -> {args.out / rundir.TRAIN_METRICS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
