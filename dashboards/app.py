"""dsdr dashboard: training dynamics, evaluation results and samples of the runs in one directory.

Start it with ``dsdr-dashboard --runs DIR`` (binds 127.0.0.1) or
``streamlit run dashboards/app.py --server.address 127.0.0.1 -- --runs DIR``.
The runs directory comes from ``--runs`` (after ``--``), else $DSDR_RUNS_DIR, else ./runs.
The app only reads: it never writes into a run directory.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import streamlit as st

try:
    from dashboards import data
except ImportError:  # `streamlit run dashboards/app.py` from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dashboards import data

from dashboards.views import evaluation, samples, training  # noqa: E402
from dsdr_eval.rundir import sweepdir  # noqa: E402

PAGES = {"training": ("Training dynamics", training.render), "evaluation": ("Evaluation", evaluation.render),
         "samples": ("Samples", samples.render)}

HOW_TO = """\
**No runs here yet.** Make one, then press *Rescan runs*:

```bash
# an evaluation run (smoke size), scored, with diversity
dsdr-eval run --model smollm2-135m --benchmarks math500 --protocol quick --limit 8 --out {root}/demo
dsdr-eval diversity {root}/demo
# a training run (metrics.jsonl grows one line per step; this page refreshes live)
dsdr-train --help
```
"""


def runs_dir_from_argv(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--runs", default=None)
    known, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    return data.runs_root(known.runs or os.environ.get("DSDR_RUNS_DIR") or "runs")


def requested_runs(root: Path, runs: list[data.RunEntry]) -> list[data.RunEntry] | None:
    """Runs named in ``?run=NAME`` (repeatable): resolved and checked to be inside the runs directory.
    A sweep directory's name stands for its evaluation runs and its training run.

    None when no run was requested (pages then show their default runs); otherwise the accepted
    ones only, possibly none: a refused name never falls back to another run."""
    names = st.query_params.get_all("run")
    if not names:
        return None
    by_path = {entry.path: entry for entry in runs}
    chosen = []
    for name in names:
        try:
            path = data.resolve_inside(root, name)
        except data.UnsafePath as exc:
            st.error(f"Ignored query parameter run={name!r}: {exc}")
            continue
        if path in by_path:
            chosen.append(by_path[path])
        elif (path / sweepdir.SWEEP_FILE).is_file():
            # a sweep directory: its checkpoints' evaluation runs, and the training run it evaluates
            chosen += data.sweep_members(path, runs)
        else:
            st.warning(f"Ignored query parameter run={name!r}: no run directory by that name in {root}")
    return chosen


def main() -> None:
    st.set_page_config(page_title="dsdr dashboard", page_icon="📈", layout="wide")
    root = runs_dir_from_argv()
    st.sidebar.title("dsdr")
    st.sidebar.caption(f"Runs directory: `{root}` (read-only)")
    if st.sidebar.button("Rescan runs"):
        st.cache_data.clear()
    runs = data.discover_runs(root)  # [] when root does not exist
    keys = list(PAGES)
    wanted = st.query_params.get("page", data.landing_page(runs))
    page = st.sidebar.radio("Page", keys, index=keys.index(wanted) if wanted in keys else 0,
                            format_func=lambda k: PAGES[k][0], key="page")
    if not root.is_dir():
        st.error(f"The runs directory `{root}` does not exist.")
        st.markdown(HOW_TO.format(root=root))
        return
    st.sidebar.caption(f"{sum(r.kind == 'train' for r in runs)} training run(s), "
                       f"{sum(r.kind == 'eval' for r in runs)} evaluation run(s)")
    for entry in runs:
        if entry.refused:
            st.sidebar.warning(f"{entry.name}: not read, symlinks to files outside the runs directory: "
                               f"{', '.join(sorted(entry.refused))}")
    if not runs:
        st.title(PAGES[page][0])
        st.info(f"No run directories found under `{root}`.")
        st.markdown(HOW_TO.format(root=root))
        return
    PAGES[page][1](root, runs, requested_runs(root, runs))


main()
