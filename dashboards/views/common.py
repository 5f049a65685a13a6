"""Cached, read-only loaders shared by the pages (cache keys include each file's mtime and size,
so a run that is still writing is re-read as soon as it changes)."""

from __future__ import annotations

import re

import pandas as pd
import streamlit as st

from dashboards import data
from dsdr_eval.rundir import directory as rundir


@st.cache_data(show_spinner=False, max_entries=256)
def _jsonl(entry: data.RunEntry, name: str, stamp: tuple) -> data.Loaded:
    return data.load_jsonl(entry, name)


def jsonl(entry: data.RunEntry, name: str) -> data.Loaded:
    """The run's JSONL file ``name`` (refused when it resolves outside the runs directory)."""
    return _jsonl(entry, name, data.file_stamp(entry.path / name))


# Not st.cache_data: that pickles a copy out on every rerun (each click), which for typed records costs
# as much as a fresh read; the frozen records are shared instead (read-only, like every cached value).
@st.cache_resource(show_spinner=False, max_entries=32)
def _sample_records(entry: data.RunEntry, name: str, stamp: tuple) -> data.Loaded:
    return data.load_jsonl(entry, name)


def sample_records(entry: data.RunEntry, name: str) -> data.Loaded:
    """The run's graded.jsonl or samples.jsonl as typed records (``data.load_jsonl``), or its error."""
    return _sample_records(entry, name, data.file_stamp(entry.path / name))


@st.cache_data(show_spinner=False, max_entries=128)
def _diversity_index(entry: data.RunEntry, stamp: tuple) -> data.Loaded:
    return data.load_diversity_index(entry)


def diversity_index(entry: data.RunEntry) -> data.Loaded:
    """The run's per-rollout diversity by SampleKey (``data.load_diversity_index``)."""
    return _diversity_index(entry, data.file_stamp(entry.path / rundir.DIVERSITY_PER_SAMPLE))


@st.cache_data(show_spinner=False, max_entries=128)
def _run_results(entry: data.RunEntry, stamps: tuple) -> data.Loaded:
    return data.load_results(entry)


def run_results(entry: data.RunEntry) -> data.Loaded:
    """The run's RunResults (metrics.json + config.json, read by dsdr_eval.rundir.results) or the error to show."""
    stamps = tuple(data.file_stamp(entry.path / f) for f in (rundir.METRICS, rundir.CONFIG, rundir.GRADED))
    return _run_results(entry, stamps)


def train_frame(entry: data.RunEntry) -> data.Loaded:
    """metrics.jsonl as a DataFrame (numeric columns; a partial last line is skipped with a note)."""
    if not entry.has(rundir.TRAIN_METRICS) and rundir.TRAIN_METRICS not in entry.refused:
        return data.Loaded(error=f"{entry.name}: no metrics.jsonl yet (the trainer writes one line per step)")
    loaded = jsonl(entry, rundir.TRAIN_METRICS)
    if not loaded.ok:
        return loaded
    if not loaded.value:
        return data.Loaded(error=f"{entry.name}: metrics.jsonl is empty (no optimizer step logged yet)")
    frame = pd.DataFrame(loaded.value)
    warnings = list(loaded.warnings)
    steps = pd.to_numeric(frame["step"], errors="coerce") if "step" in frame else pd.Series(float("nan"), index=frame.index)
    if steps.isna().any():
        warnings.append(f"{entry.name}/metrics.jsonl: {int(steps.isna().sum())} line(s) without a numeric 'step'; "
                        "their line number is used instead")
        steps = steps.fillna(pd.Series(range(1, len(frame) + 1), index=frame.index, dtype=float))
    frame["step"] = steps
    if "time/total_s" in frame:  # per-step wall time -> elapsed wall time, for the x axis
        frame["time/elapsed_s"] = pd.to_numeric(frame["time/total_s"], errors="coerce").fillna(0).cumsum()
    # Numeric columns only: a string in a metric column becomes NaN instead of breaking a chart.
    for column in frame.columns:
        if column != "step" and not pd.api.types.is_numeric_dtype(frame[column]):
            frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return data.Loaded(frame, warnings=warnings)


def display_labels(entries: list[data.RunEntry]) -> dict[str, str]:
    """entry.name -> display label (the config label, plus the directory when labels collide)."""
    counts: dict[str, int] = {}
    for e in entries:
        counts[e.label] = counts.get(e.label, 0) + 1
    return {e.name: (e.label if counts[e.label] == 1 else f"{e.label} ({e.name})") for e in entries}


def pick_runs(title: str, entries: list[data.RunEntry], requested: list[data.RunEntry] | None, *, key: str,
              default_count: int = 4) -> list[data.RunEntry]:
    """A multiselect of runs: preselected are the requested ones (``?run=``), or, when none was
    requested (``requested is None``), the default comparison (``data.default_selection``). A refused
    request preselects nothing: it never falls back to other runs."""
    labels = display_labels(entries)
    names = [e.name for e in entries]
    if requested is None:
        wanted = data.default_selection(names, {e.name: e.algo for e in entries}, default_count)
    else:
        wanted = [e.name for e in requested if e.name in names]
    chosen = st.multiselect(title, names, default=wanted, format_func=lambda n: f"{labels[n]} — {n}"
                            if labels[n] != n else n, key=key)
    by_name = {e.name: e for e in entries}
    return [by_name[n] for n in chosen]


_IMAGE_OPENER = re.compile(r"!\[")


def markdown_text(text: str) -> str:
    """Untrusted text (problem statements, extracted answers) for st.markdown and labels: Markdown
    image syntax ``![alt](url)`` is escaped, so it shows as text and the browser fetches nothing.
    Math and the rest of Markdown still render; raw HTML is already escaped by Streamlit."""
    return _IMAGE_OPENER.sub(r"!\\[", text)  # "!\[" is a literal "![": neither an image nor a link


def inline_code(text: str) -> str:
    """``text`` as one inline code span (backticks inside cannot end it)."""
    return "`" + text.replace("`", "'") + "`"
