"""Published reference numbers: the DSDR paper's Table 1 (docs/ALGORITHMS.md §6), shipped as package data.

The table is kept *as printed* (strings with the printed precision) and the cells that do not
add up are flagged in the data file itself, so a report can show published numbers beside a run
without silently "correcting" them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from dsdr_eval.errors import DsdrError

PAPER = "paper"


@dataclass(frozen=True)
class ReferenceRow:
    """One published row: values in percent (float) per benchmark (+ "average") and metric."""

    block_id: str
    backbone: str
    method: str
    max_tokens: int
    values: dict[str, dict[str, float]]  # benchmark -> {"pass1": %, "avg@16": %}
    printed: dict[str, dict[str, str]]  # the same, as printed
    flags: dict[str, str]  # "benchmark.metric" -> why the cell is flagged

    @property
    def label(self) -> str:
        return f"{self.backbone} {self.method} (published)"


def load_paper_table() -> dict[str, Any]:
    with resources.files("dsdr_eval").joinpath("data", "paper_table1.json").open("r", encoding="utf-8") as fh:
        return json.load(fh)


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "", text.lower())


def paper_rows(table: dict[str, Any] | None = None) -> list[ReferenceRow]:
    table = table or load_paper_table()
    rows = []
    for block in table["blocks"]:
        for row in block["rows"]:
            printed = {bench: dict(cell) for bench, cell in row["cells"].items()}
            values = {bench: {metric: float(v) for metric, v in cell.items()} for bench, cell in printed.items()}
            flags = {flag["cell"]: flag["note"] for flag in row.get("flags", [])}
            rows.append(ReferenceRow(block["id"], block["backbone"], row["method"], int(block["max_tokens"]),
                                     values, printed, flags))
    return rows


def block_ids(table: dict[str, Any] | None = None) -> list[str]:
    table = table or load_paper_table()
    return [block["id"] for block in table["blocks"]]


def select_reference(spec: str | None, *, model_hints: list[str] | None = None) -> list[ReferenceRow]:
    """Rows for ``--reference`` SPEC.

    ``paper``            -> the block(s) whose backbone name appears in a run's model spec/path
                            (e.g. a run of Qwen3-1.7B gets the Qwen3-1.7B block), all blocks if none does;
    ``paper:all``        -> every block;
    ``paper:BLOCK[,..]`` -> the named block(s): qwen2.5-math-1.5b, qwen3-1.7b, qwen3-4b.
    """
    if not spec:
        return []
    source, _, selector = spec.partition(":")
    if source != PAPER:
        raise DsdrError(f"--reference {spec!r}: unknown reference {source!r} (known: {PAPER}, "
                        f"{PAPER}:all, " + ", ".join(f"{PAPER}:{b}" for b in block_ids()) + ")")
    rows = paper_rows()
    known = block_ids()
    if selector in ("", "auto"):
        hints = [_norm(h) for h in (model_hints or []) if h]
        # longest id first so "qwen2.5-math-1.5b" is not mistaken for a shorter id it contains
        matched = [b for b in sorted(known, key=len, reverse=True) if any(_norm(b) in h for h in hints)]
        wanted = matched[:1] if matched else known
    elif selector == "all":
        wanted = known
    else:
        wanted = [s.strip().lower() for s in selector.split(",") if s.strip()]
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise DsdrError(f"--reference {spec!r}: unknown block(s) {', '.join(unknown)} "
                            f"(known: {', '.join(known)}, all)")
    return [row for row in rows if row.block_id in wanted]
