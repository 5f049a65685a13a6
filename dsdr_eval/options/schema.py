"""The option declaration (``Option``), and what the library makes of a command's declarations without
argparse: the frozen options dataclass of a command (``options_class``), the signature of its keyword
function (``signature``) and the check of a keyword value (``checked``).

A value passed to ``dsdr_eval.evaluate`` & co. goes through the same ``check``/``choices`` as the typed
string of the command line (``dsdr_eval.options.parser``), so the API and the CLI accept and convert the
same values (``temperature=1`` becomes ``1.0`` either way) and a bad one is a one-line ``DsdrError``.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from dsdr_eval.errors import DsdrError

VALUE, FLAG, REPEATED = "value", "flag", "repeated"  # Option.kind: one value, store_true, repeatable (a list)


@dataclass(frozen=True)
class Option:
    """One option (or positional) of a command, as both the command line and the API know it.

    ``name`` is the keyword and the argparse dest; ``flag`` the command-line spelling (None: a
    positional); ``check`` turns the typed text into the value (None: the text); ``group`` the
    --help section (None: the command's own options); ``aliases`` old spellings that still parse,
    hidden from --help; ``hidden`` an option that parses but is not shown (nor an API keyword)."""

    name: str
    flag: str | None
    help: str | None = None
    default: Any = None
    check: Callable[[str], Any] | None = None
    choices: tuple[Any, ...] | None = None
    kind: str = VALUE
    required: bool = False
    metavar: str | None = None
    group: str | None = None
    nargs: str | None = None  # argparse nargs: a positional's ("*": any number), or "?" for an optional value
    const: Any = None  # with nargs="?": the value of the flag given without one (dsdr-train --where)
    aliases: tuple[str, ...] = ()
    hidden: bool = False

    @property
    def is_required(self) -> bool:
        """Required on the command line, so a parameter without a default in the API."""
        return self.required or self.flag is None

    def convert(self, value: Any) -> Any:
        """A Python value checked and converted as the typed text of the option would be; raises
        TypeError/ValueError/argparse.ArgumentTypeError with the reason."""
        if self.kind == FLAG:
            if not isinstance(value, bool):
                raise TypeError("expected True or False")
            return value
        if self.kind == REPEATED:  # --base-url, --stop, --label: one string or several
            values = [value] if isinstance(value, str) else list(value)
            if not all(isinstance(v, str) and v for v in values):
                raise TypeError("expected a non-empty string or a list of them")
            return values
        if isinstance(value, (list, tuple)):  # a comma-list option given as a Python list
            if not all(isinstance(v, str) for v in value):
                raise TypeError("expected a list of strings")
            value = ",".join(value)
        if isinstance(value, bool) or not isinstance(value, (str, int, float)) and not hasattr(value, "__fspath__"):
            raise TypeError(f"expected a {'number' if self.check else 'string'}, got {type(value).__name__}")
        text = str(value)
        converted = self.check(text) if self.check is not None else text
        if self.choices is not None and converted not in self.choices:
            raise ValueError(f"must be one of {', '.join(map(str, self.choices))}")
        return converted


def keywords(options: Sequence[Option]) -> list[Option]:
    """The options that are keywords of the API (not the hidden ones)."""
    return [option for option in options if not option.hidden]


def checked(options: Sequence[Option], caller: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (keyword -> value) checked and converted as the command line checks ``options``; a
    value equal to the option's default is kept as it is. Raises DsdrError ``CALLER(KEY=VALUE): why``."""
    declared = {option.name: option for option in options}
    result = dict(values)
    for key, value in values.items():
        option = declared.get(key)
        if option is None or value is None or (value == option.default and type(value) is type(option.default)):
            continue
        try:
            result[key] = option.convert(value)
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise DsdrError(f"{caller}({key}={value!r}): {exc}") from None
    return result


_VALUE_TOKEN = r"(?: ([\w.:/@+-]+))?"


def keyword_spelling(message: str, options: Sequence[Option]) -> str:
    """``message`` with each of ``options``' command-line flags spelled as the API keyword the caller
    wrote: ``use --from jsonl`` -> ``use tool='jsonl'``, ``needs --out`` -> ``needs out=``. The value after
    a flag is taken along only when it is one of the option's choices (prose after a flag stays prose)."""
    import re

    for option in sorted((o for o in options if o.flag), key=lambda o: -len(o.flag or "")):
        pattern = re.compile(r"(?<![\w-])" + re.escape(option.flag or "") + r"(?![\w-])" + _VALUE_TOKEN)

        def spell(match: "re.Match[str]", option: Option = option) -> str:
            value = match.group(1)
            if value is not None and option.choices is not None and value in map(str, option.choices):
                return f"{option.name}={value!r}"
            return f"{option.name}=" + (f" {value}" if value is not None else "")
        message = pattern.sub(spell, message)
    return message


def _default(option: Option) -> dataclasses.Field:
    if isinstance(option.default, list):  # a repeatable option's []: one fresh list per instance
        return dataclasses.field(default_factory=list)
    return dataclasses.field(default=option.default)


def options_class(name: str, options: Sequence[Option], doc: str) -> type:
    """The frozen dataclass of a command's API keywords: one field per option, the required ones first
    (a dataclass field without a default cannot follow one with a default), each in declared order."""
    shown = keywords(options)
    fields = [(o.name, Any) for o in shown if o.is_required] + \
             [(o.name, Any, _default(o)) for o in shown if not o.is_required]
    cls = dataclasses.make_dataclass(name, fields, frozen=True)
    cls.__module__ = "dsdr_eval.options.commands"  # where the class is declared (repr, pickling)
    cls.__doc__ = doc
    return cls


def signature(options: Sequence[Option], *, positional: Sequence[str] = (),
              extra: Sequence[inspect.Parameter] = ()) -> inspect.Signature:
    """The signature of a command's keyword function: the positionals first (and the options named in
    ``positional``, e.g. run's ``model``), then every other option keyword-only (a required one without a
    default), then ``extra`` (seams that are not options)."""
    shown = keywords(options)
    first = [o for o in shown if o.flag is None or o.name in positional]
    parameters = [inspect.Parameter(o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for o in first]
    parameters += [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY,
                                     default=inspect.Parameter.empty if o.required else o.default)
                   for o in shown if o not in first]
    return inspect.Signature([*parameters, *extra])
