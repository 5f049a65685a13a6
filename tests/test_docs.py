"""The documentation stays true to the repository and the CLI.

* every relative link of README.md and docs/*.md resolves: the file (or folder) exists and a
  `#anchor` names a heading of the target page, slugged as GitHub does;
* the README stays an overview (<= 250 lines; the reference lives in docs/);
* every `dsdr-eval` subcommand is documented under a heading or in a code span of docs/, and so is
  each of its visible options; every `dsdr-train` flag, engine and algorithm is documented too;
* `mkdocs build --strict` (mkdocs.yml: the same pages as a site, links and anchors validated again).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import pytest

from dsdr_eval.cli import SUBCOMMANDS
from dsdr_eval.options.commands import COMMANDS
from dsdr_eval.options.schema import Option
from dsdr_train.cli import options as train_options

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_LINES = 250

FENCE = re.compile(r"^(```|~~~)")
# [text](target) and ![alt](target); a target ends at whitespace or ')' (none of ours has a title)
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def doc_pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def split_markdown(text: str) -> tuple[list[str], list[str]]:
    """(prose lines, fenced code lines): links and headings count only outside code fences."""
    prose, code, fenced = [], [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        (code if fenced else prose).append(line)
    return prose, code


def github_slug(heading: str) -> str:
    """GitHub's anchor of a heading: the rendered text lower-cased, every character that is not a
    letter, digit, space, '-' or '_' dropped, spaces turned into '-' (so `a: b` -> `a-b`)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text, not its target
    text = text.replace("`", "").replace("*", "")
    text = "".join(ch for ch in text.lower() if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a page; a repeated slug gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for line in split_markdown(page.read_text(encoding="utf-8"))[0]:
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def broken_links(page: Path) -> list[str]:
    problems = []
    prose, _ = split_markdown(page.read_text(encoding="utf-8"))
    for number, line in enumerate(prose, 1):
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: - not checked offline
                continue
            path_part, _, anchor = target.partition("#")
            resolved = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(REPO)}: link {target!r}"
            if not resolved.exists():
                problems.append(f"{where}: {path_part} does not exist")
            elif anchor and (resolved.suffix != ".md" or anchor not in anchors(resolved)):
                problems.append(f"{where}: no heading with anchor #{anchor} in {resolved.relative_to(REPO)}")
    return problems


def documented_text() -> tuple[str, str]:
    """(every heading of docs/, every code span and fenced block of docs/), newline-joined."""
    headings, spans = [], []
    for page in sorted(DOCS.glob("*.md")):
        prose, code = split_markdown(page.read_text(encoding="utf-8"))
        spans.extend(code)
        for line in prose:
            match = HEADING.match(line)
            if match:
                headings.append(match.group(2))
            spans.extend(span for _, span in CODE_SPAN.findall(line))
    return "\n".join(headings), "\n".join(spans)


def mentions(text: str, phrase: str) -> bool:
    """``phrase`` as a whole token sequence of ``text`` (`--seed` is not found in `--seed-x`)."""
    return re.search(rf"(?<![\w-]){re.escape(phrase)}(?![\w-])", text) is not None


def visible_options(options: Sequence[Option]) -> list[str]:
    """The flags --help shows (the declarations the parser is built from; old spellings are hidden)."""
    return [option.flag for option in options if option.flag is not None and not option.hidden]


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_github_slugs():
    # the rules the anchors above rely on, on headings of these pages
    assert github_slug("`dsdr-eval score`: grade completions you already have") == \
        "dsdr-eval-score-grade-completions-you-already-have"
    assert github_slug("Protocols (`dsdr_eval/protocols.py`, frozen dataclasses)") == \
        "protocols-dsdr_evalprotocolspy-frozen-dataclasses"
    assert github_slug("5. Evaluation protocol (DSDR paper, Table 3)") == "5-evaluation-protocol-dsdr-paper-table-3"
    assert github_slug("The TRL engine (`--engine trl`)") == "the-trl-engine---engine-trl"


def test_readme_is_an_overview():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move reference text to docs/"


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_every_dsdr_eval_subcommand_and_option_is_documented(name):
    headings, spans = documented_text()
    command = f"dsdr-eval {name}"
    assert mentions(headings, command) or mentions(spans, command), \
        f"`{command}` is neither a heading nor a code span in docs/"
    missing = [option for option in visible_options(COMMANDS[name][0]) if not mentions(spans, option)]
    assert missing == [], f"options of `{command}` not documented in a code span of docs/: {missing}"


def test_every_dsdr_train_flag_engine_and_algo_is_documented():
    _, spans = documented_text()
    options = train_options()
    missing = [option for option in visible_options(options) if not mentions(spans, option)]
    for option in options:
        if option.name == "engine":
            missing += [f"--engine {engine}" for engine in option.choices if not mentions(spans, f"--engine {engine}")]
        elif option.name == "algo":
            missing += [algo for algo in option.choices if not mentions(spans, algo)]
    assert missing == [], f"dsdr-train flags / engines / algorithms not documented in docs/: {missing}"


def test_mkdocs_build_strict(tmp_path):
    # mkdocs and mkdocs-material come with requirements-cpu.txt (make setup); an older environment skips
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # material's end-of-life banner, not a finding
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "evaluate" / "index.html").is_file()
