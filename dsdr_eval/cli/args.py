"""What every ``dsdr-eval`` subcommand does with its parsed command line: the parser is built from the
library's option declarations (``dsdr_eval.options``) and the parsed values become the library's
frozen options."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any


def from_namespace(cls: type, args: argparse.Namespace) -> Any:
    """The options dataclass ``cls`` of a parsed command line (its dests are the field names)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{key: value for key, value in vars(args).items() if key in names})
