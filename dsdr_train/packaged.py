"""The files `dsdr_train` ships in its wheel: training configs, accelerate configs, the verl launch script.

Docs and users name them by a short name (``cpu_demo``, ``paper_dsdr``, ``accelerate/zero2``,
``verl/paper_runs.sh``) because a repository path (``dsdr_train/configs/cpu_demo.yaml``) only exists
in a clone; ``dsdr-train --where [NAME]`` prints where the installed copy lives, so tools that take a
path of their own (``accelerate launch --config_file``) can be pointed at it.
"""

from __future__ import annotations

from pathlib import Path

from dsdr_eval.errors import DsdrError

PACKAGE_DIR = Path(__file__).resolve().parent
CONFIG_DIR = PACKAGE_DIR / "configs"
# short-name prefix -> folder; configs are the default (no prefix), as in `--config paper_dsdr`
FOLDERS: dict[str, Path] = {
    "": CONFIG_DIR,
    "accelerate/": CONFIG_DIR / "accelerate",
    "verl/": PACKAGE_DIR / "integrations" / "verl",
}
SUFFIXES = {"": ".yaml", "accelerate/": ".yaml", "verl/": ".sh"}


def packaged_files() -> dict[str, Path]:
    """Every shipped file by its short name (``paper_dsdr``, ``accelerate/zero2``, ``verl/paper_runs.sh``)."""
    out: dict[str, Path] = {}
    for prefix, folder in FOLDERS.items():
        suffix = SUFFIXES[prefix]
        for path in sorted(folder.glob(f"*{suffix}")):
            # configs drop their .yaml (`--config paper_dsdr`); scripts keep .sh, which is part of how they are run
            name = path.stem if suffix == ".yaml" else path.name
            out[prefix + name] = path
    return out


def resolve_packaged(name: str, *, what: str = "packaged file") -> Path:
    """The shipped file ``name`` names (with or without ``.yaml``), or a one-line error listing the names."""
    files = packaged_files()
    key = name[: -len(".yaml")] if name.endswith(".yaml") else name
    # a repository path to a shipped file (the docs' older spelling) names it too, from any directory
    for prefix, folder in FOLDERS.items():
        repo_form = f"dsdr_train/{folder.relative_to(PACKAGE_DIR).as_posix()}/"
        if key.startswith(repo_form):
            key = prefix + key[len(repo_form):]
    if key in files:
        return files[key]
    raise DsdrError(f"{name}: no such file, and no {what} of that name (shipped: {', '.join(files)}; "
                    "`dsdr-train --where` prints where they are)")


def resolve_config_path(value: str) -> Path:
    """``--config VALUE``: an existing file wins; otherwise a shipped config by name (``paper_dsdr``)."""
    path = Path(value)
    if path.exists():
        return path
    return resolve_packaged(value, what="shipped config")


def where_text(name: str | None) -> str:
    """``dsdr-train --where``: every shipped file with its path, or the path of one (for $(...) in a shell)."""
    if name:
        return str(resolve_packaged(name))
    files = packaged_files()
    width = max(len(k) for k in files)
    lines = [f"dsdr_train's shipped files (name them with --config NAME, or `dsdr-train --where NAME` for the path):"]
    lines += [f"  {key:<{width}}  {path}" for key, path in files.items()]
    return "\n".join(lines)


__all__ = ["CONFIG_DIR", "packaged_files", "resolve_packaged", "resolve_config_path", "where_text"]
