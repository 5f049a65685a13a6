"""Run verl 0.9.1's own CPU unit tests of its PPO core (tests/trainer/ppo/*_on_cpu.py) with the dsdr
plugin loaded, against the installed verl.

The wheel has no tests; the sdist on PyPI does, so CI (PyPI only, no GitHub) gets them with pip:
``pip download --no-deps --no-binary :all: verl==0.9.1``. The test files are extracted into a cache
directory (default ``.venv-verl/verl-tests``, outside the repo's tracked tree) and run from there, so
``import verl`` is the installed package, not the sdist's copy. A session-start check fails the run
unless the plugin's estimators are in verl's registry, i.e. the upstream tests really ran beside it.

    .venv-verl/bin/python tests_verl/verl_upstream.py [--cache DIR] [pytest args...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
from pathlib import Path

VERL_VERSION = "0.9.1"
PATTERN = "tests/trainer/ppo/"
PLUGIN_NAMES = ("dsdr", "dsdr_wo_gd", "dsdr_wo_gc", "darling", "grpo_pop_std")


def fetch_tests(cache: Path) -> Path:
    """The extracted ``tests/trainer/ppo/*_on_cpu.py`` of the verl sdist (downloaded once)."""
    target = cache / f"verl-{VERL_VERSION}"
    if (target / "tests" / "trainer" / "ppo").is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / f"verl-{VERL_VERSION}.tar.gz"
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        f"verl=={VERL_VERSION}", "-d", str(cache)], check=True)
    prefix = f"verl-{VERL_VERSION}/"
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.isfile() and m.name.startswith(prefix) and (
            (m.name.startswith(prefix + PATTERN) and m.name.endswith("_on_cpu.py"))
            or m.name in (prefix + "tests/__init__.py", prefix + "tests/trainer/__init__.py",
                          prefix + PATTERN + "__init__.py"))]
        archive.extractall(cache, members=members, filter="data")
    return target


class PluginLoaded:
    """pytest plugin: abort the session unless ``import verl`` registered the dsdr estimators."""

    @staticmethod
    def pytest_sessionstart(session):
        import pytest
        import verl  # loads the verl.plugins entry points
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

        missing = [name for name in PLUGIN_NAMES if name not in ADV_ESTIMATOR_REGISTRY]
        if missing:
            pytest.exit(f"the dsdr plugin did not load on `import verl` {verl.__version__} (missing {missing})",
                        returncode=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path(".venv-verl") / "verl-tests")
    args, pytest_args = parser.parse_known_args(argv)
    root = fetch_tests(args.cache.resolve())
    import pytest

    files = sorted(str(p) for p in (root / PATTERN).glob("*_on_cpu.py"))
    return int(pytest.main(["-q", "-p", "no:cacheprovider", "-W", "ignore::UserWarning", "--rootdir", str(root),
                            *pytest_args, *files], plugins=[PluginLoaded()]))


if __name__ == "__main__":
    sys.exit(main())
