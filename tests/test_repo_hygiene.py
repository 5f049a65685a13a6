"""Tracked files never name a path of the machine they were made on: a run directory, config or report
made here must open anywhere (run directories record paths relative to the checkout or under ~)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [REPO / name for name in out.decode().split("\0") if name]


def test_no_tracked_file_contains_an_absolute_path_of_this_machine():
    # the folder holding the checkout (and ../shared) and the home directory: where run
    # directories, configs and reports would leak a machine path from; not the system temp
    # directory (too common a prefix: README examples write to /tmp/...)
    needles = {str(REPO.parent).rstrip("/") + "/", str(Path.home()).rstrip("/") + "/"}
    needles -= {"/", "/tmp/", "/var/tmp/"}
    offenders = []
    for path in _tracked_files():
        if not path.is_file() or path.stat().st_size > 5_000_000:
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        offenders += [f"{path.relative_to(REPO)}: {needle}" for needle in needles if needle in text]
    assert not offenders, "absolute machine paths in tracked files:\n" + "\n".join(offenders[:20])
