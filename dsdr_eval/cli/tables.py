"""The one summary-table printer of the dsdr-eval commands (rich), used by run, score, diversity and judge."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Column:
    name: str
    justify: str = "left"
    fold: bool = False  # wrap a long cell (e.g. failure reasons) instead of cutting it with an ellipsis


@dataclass(frozen=True)
class Row:
    cells: Sequence[str]
    style: str | None = None  # e.g. "bold" for an average row


def print_table(title: str, columns: Sequence[str | Column], rows: Iterable[Sequence[str] | Row], *,
                stderr: bool = False, pipe_width: int = 160) -> None:
    """Print one table on stdout (or stderr). A pipe or a log file gets ``pipe_width`` columns
    instead of rich's 80, so no column is squeezed or cut."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        spec = column if isinstance(column, Column) else Column(column)
        table.add_column(spec.name, justify=spec.justify, overflow="fold" if spec.fold else "ellipsis")
    for row in rows:
        if isinstance(row, Row):
            table.add_row(*row.cells, style=row.style)
        else:
            table.add_row(*row)
    stream: Any = sys.stderr if stderr else sys.stdout
    console = Console(file=stream)
    if not console.is_terminal:
        console = Console(file=stream, width=pipe_width)
    console.print(table)


def numeric_columns(first: str, *others: str) -> list[Column]:
    """A left-aligned label column followed by right-aligned number columns."""
    return [Column(first), *(Column(name, justify="right") for name in others)]
