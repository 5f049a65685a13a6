"""The argparse side of the option declarations: ``OneLineParser`` (the parser of every dsdr command
line: dsdr-eval, dsdr-train, dsdr-dashboard) and ``add_options``, which adds a command's declared
options (``dsdr_eval.options.commands``) to a parser, in declared order, each in its --help group."""

from __future__ import annotations

import argparse
import shlex
from typing import Any, Callable, NoReturn, Sequence

from dsdr_eval.options.schema import FLAG, REPEATED, Option


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``PROG: error: MESSAGE (see PROG --help)``)
    instead of the usage block and the error. Subparsers inherit the class. ``help_prog``: whose --help the
    error points to (dsdr-eval's top parser reports a subcommand's unknown options: that subcommand's);
    ``known``: the option strings an unrecognized one is matched against (did you mean ...?)."""

    help_prog: str | None = None
    known: Sequence[str] = ()

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        if text.startswith("unrecognized arguments:"):
            text += did_you_mean(text.split(":", 1)[1].split(), self.known or list(self._option_string_actions))
        self.exit(2, f"{self.prog}: error: {text} (see {self.help_prog or self.prog} --help)\n")


def did_you_mean(given: Sequence[str], known: Sequence[str]) -> str:
    """``; did you mean --max-tokens?`` for the first given option close to a known one ('' if none)."""
    import difflib

    for word in given:
        if word.startswith("-"):
            close = difflib.get_close_matches(word.split("=", 1)[0], [k for k in known if k.startswith("--")], n=1,
                                              cutoff=0.6)
            if close:
                return f"; did you mean {close[0]}?"
    return ""


def _typed(flag: str, check: Callable[[str], Any]) -> Callable[[str], Any]:
    """``check`` whose refusal names the option and the value as they were typed ("--batch-size 0: must
    be ..."): an ArgumentError without an action is printed as its message alone."""
    def convert(text: str) -> Any:
        try:
            return check(text)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentError(None, f"{flag} {shlex.quote(text)}: {exc}") from None
    convert.__name__ = getattr(check, "__name__", "value")  # argparse names a check by it in other errors
    return convert


def _arguments(option: Option) -> dict[str, Any]:
    """``add_argument``'s keywords for ``option`` (its help is plain text: a '%' is escaped for argparse)."""
    help_text = argparse.SUPPRESS if option.hidden else (option.help.replace("%", "%%") if option.help else None)
    keywords: dict[str, Any] = {"help": help_text}
    if option.metavar is not None:
        keywords["metavar"] = option.metavar
    if option.flag is None:  # a positional: argparse names it in its own error
        return {**keywords, **({"nargs": option.nargs} if option.nargs else {}),
                **({"type": option.check} if option.check else {})}
    keywords.update(dest=option.name, default=option.default)
    if option.kind == FLAG:
        return {**keywords, "action": "store_true"}
    if option.kind == REPEATED:
        keywords["action"] = "append"
    if option.required:
        keywords["required"] = True
    if option.check is not None:
        keywords["type"] = _typed(option.flag, option.check)
    if option.choices is not None:
        keywords["choices"] = option.choices
    if option.nargs is not None:
        keywords.update(nargs=option.nargs, const=option.const)
    return keywords


def add_options(parser: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    """Add ``options`` to ``parser`` in declared order; a group is made where its first option comes, so
    the usage line and --help list the options as they are declared."""
    groups: dict[str, Any] = {}
    for option in options:
        if option.group is None:
            target: Any = parser
        else:
            target = groups.get(option.group) or groups.setdefault(option.group,
                                                                   parser.add_argument_group(option.group))
        if option.flag is None:
            target.add_argument(option.name, **_arguments(option))
            continue
        target.add_argument(option.flag, **_arguments(option))
        for alias in option.aliases:  # an old spelling: parses to the same name, hidden from --help
            target.add_argument(alias, dest=option.name, type=option.check and _typed(alias, option.check),
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)
