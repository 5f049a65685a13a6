"""Samples: per benchmark and problem, the problem, the gold answer and every rollout with its
extracted answer, grading status, per-rollout diversity (diversity_per_sample.jsonl) and formulas.

Model outputs and problem statements are untrusted text: completions are shown in code blocks
(never as HTML or Markdown), the formula chips are HTML-escaped before they are put in the page,
and the problem text and extracted answers are rendered with their Markdown images escaped (an
image would make the browser fetch its URL).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd
import streamlit as st

from dashboards import data
from dashboards.views.common import display_labels, diversity_index, inline_code, markdown_text, sample_records
from dsdr_eval.rundir import directory as rundir
from dsdr_eval.diversity_metrics.formula import formula_set  # the one formula extractor (DSDR §3.1)
from dsdr_eval.diversity_metrics.run import rollout_text
from dsdr_eval.grading.audit import FLAGS as AUDIT_FLAGS
from dsdr_eval.reporting.runs import benchmark_title, order_benchmarks
from dsdr_eval.rundir.samples import GradedSample, Sample, SampleKey, sample_of

Record = Sample | GradedSample  # samples.jsonl / graded.jsonl, as the sample schema reads them
STATUSES = ("correct", "incorrect", "no_answer", "truncated", "timeout", "error", "ungraded")
# Coloured status words (Streamlit markdown), not emoji: headless browsers often lack an emoji font.
ICONS = {"correct": ":green[●]", "incorrect": ":red[●]", "no_answer": ":orange[○]", "truncated": ":orange[◐]",
         "timeout": ":violet[◷]", "error": ":red[■]", "ungraded": ":gray[·]"}
MAX_ROLLOUTS_SHOWN = 64
ALL_SAMPLES = "(every sample)"  # the audit filter's first choice: no filter
# diversity_per_sample.jsonl (dsdr-eval diversity): DSDR d = (d_emb + d_eq)/2 within the problem's
# rollouts, DARLING div; the same with suffix _correct within the correct rollouts only.
HEADER_DIVERSITY = ("d", "d_emb", "d_eq", "div")


def _status(record: Record) -> str:
    status = record.status if isinstance(record, GradedSample) else None
    return status if status in STATUSES else "ungraded"


def _extracted(record: Record) -> str | None:
    return record.extracted if isinstance(record, GradedSample) else None


# Characters with a meaning to Streamlit's Markdown (images ``![](url)``, links, math ``$``, emphasis,
# ``:color[...]`` directives, code, HTML) become numeric character references: the chips' HTML is
# parsed as Markdown too, and a reference is decoded only after parsing, so it shows as that character.
_CHIP_LITERAL = set("!$[]()*_`\\~:{}#|<>&\"'=/^+-%@")


def chip_text(formula: str) -> str:
    """A formula (model output) as the literal text of an HTML chip: nothing in it can render as
    Markdown, HTML or math, so it cannot make the page load anything."""
    return "".join(f"&#{ord(ch)};" if ch in _CHIP_LITERAL or not ch.isprintable() else ch for ch in formula)


def _formula_chips(own: frozenset[str], holders: Counter) -> str:
    """Formulas of one rollout: green = no other rollout of the group has it (counts toward D_eq)."""
    chips = []
    for formula in sorted(own, key=lambda f: (holders[f] > 1, f))[:40]:
        unique = holders[formula] == 1
        style = ("background:#d4f7d4;border:1px solid #5cb85c" if unique
                 else "background:#eee;border:1px solid #ccc")
        chips.append(f'<code style="{style};border-radius:4px;padding:1px 4px;margin:2px;display:inline-block">'
                     f"{chip_text(formula[:200])}</code>")
    more = f" … and {len(own) - 40} more" if len(own) > 40 else ""
    return " ".join(chips) + more


def _pick_run(evals: list[data.RunEntry], requested: list[data.RunEntry] | None) -> data.RunEntry | None:
    labels = display_labels(evals)
    names = [e.name for e in evals]
    if requested is None:
        default: int | None = 0
    else:  # a refused or unknown ?run= selects nothing: it never falls back to another run
        default = next((names.index(e.name) for e in requested if e.name in names), None)
    name = st.selectbox("Run", names, index=default, format_func=lambda n: f"{labels[n]} — {n}", key="samples_run",
                        placeholder="Choose a run")
    if name is None:
        st.info("The requested run is not shown (see above); choose a run.")
        return None
    return next(e for e in evals if e.name == name)


def _load_records(entry: data.RunEntry) -> list[Record] | None:
    """graded.jsonl (else samples.jsonl) of the run as typed records, with its warnings shown; None
    when unreadable (the reader's FILE:LINE:FIELD message is shown)."""
    graded = entry.has(rundir.GRADED)
    loaded = sample_records(entry, rundir.GRADED if graded else rundir.SAMPLES)
    if not loaded.ok:
        st.error(loaded.error, icon=":material/error:")
        return None
    for warning in loaded.warnings:
        st.caption(f"Warning: {warning}")
    if not graded:
        st.warning("Not graded yet (samples.jsonl only): run `dsdr-eval score` to see extracted answers and statuses.")
    return loaded.value


def _load_diversity(entry: data.RunEntry) -> dict[SampleKey, dict[str, float]]:
    if not entry.has(rundir.DIVERSITY_PER_SAMPLE):
        return {}
    loaded = diversity_index(entry)
    if not loaded.ok:
        st.caption(f"Warning: per-rollout diversity not shown: {loaded.error}")
        return {}
    return loaded.value


def _audit(record: Record) -> tuple[str, ...]:
    """The audit flags of a graded record (issue 43; none for a sample, or a file graded before them)."""
    return (record.audit or ()) if isinstance(record, GradedSample) else ()


def _pick_flag(column, records: list[Record]) -> str | None:
    """The audit flag chosen (None: every sample), among those the benchmark's records raise, with counts."""
    counts = Counter(flag for r in records for flag in _audit(r))
    options = [ALL_SAMPLES, *(flag for flag in AUDIT_FLAGS if counts[flag])]
    chosen = column.selectbox("Audit flag", options, key="samples_audit",
                              format_func=lambda f: f if f == ALL_SAMPLES else f"{f} ({counts[f]})",
                              help="only the problems and rollouts raising this audit flag "
                                   "(docs/evaluate.md, Audit flags; `dsdr-eval audit RUN_DIR` lists them)")
    return None if chosen == ALL_SAMPLES else chosen


def _pick_problem(records: list[Record], graded: bool) -> tuple[str, str | None, str | None, list[Record]]:
    """(benchmark, audit flag or None, problem_id, its rollouts ordered by phase and sample_idx), as chosen
    in the page; problem_id None when no problem raises the flag."""
    benchmarks = order_benchmarks({r.key.benchmark for r in records})
    c1, c3, c2 = st.columns([1, 1, 3])
    benchmark = c1.selectbox("Benchmark", benchmarks, format_func=benchmark_title, key="samples_benchmark")
    flag = _pick_flag(c3, [r for r in records if r.key.benchmark == benchmark])
    flagged = {r.key.problem_id for r in records if r.key.benchmark == benchmark and flag in _audit(r)}
    by_problem: dict[str, list[Record]] = {}
    for r in records:
        if r.key.benchmark == benchmark and (flag is None or r.key.problem_id in flagged):
            by_problem.setdefault(r.key.problem_id, []).append(r)

    def describe(pid: str) -> str:
        group = by_problem[pid]
        n_correct = sum(isinstance(r, GradedSample) and r.correct for r in group)
        return f"{pid} — {n_correct}/{len(group)} correct" if graded else f"{pid} — {len(group)} rollouts"

    problem_id = c2.selectbox("Problem", list(by_problem), format_func=describe, key="samples_problem")
    if problem_id is None:
        return benchmark, flag, None, []
    group = sorted(by_problem[problem_id], key=lambda r: (r.key.phase, r.key.sample_idx))
    return benchmark, flag, problem_id, group


def render(root: Path, runs: list[data.RunEntry], requested: list[data.RunEntry] | None) -> None:
    st.title("Samples")
    evals = [r for r in runs if r.kind == "eval" and (r.has(rundir.GRADED) or r.has(rundir.SAMPLES))]
    if not evals:
        st.info(f"No evaluation run with samples under `{root}`. `dsdr-eval run ... --out {root}/NAME` writes "
                "samples.jsonl; `dsdr-eval score` adds graded.jsonl (extracted answers and statuses).")
        return
    entry = _pick_run(evals, requested)
    records = _load_records(entry) if entry is not None else None
    if records is None:
        return
    if not records:
        st.info("This run has no samples yet.")
        return
    diversity = _load_diversity(entry)
    benchmark, flag, problem_id, group = _pick_problem(records, entry.has(rundir.GRADED))
    if problem_id is None:
        st.info("No problem of this benchmark raises the audit flag.")
        return

    f1, f2, f3 = st.columns([3, 2, 1])
    present_statuses = [s for s in STATUSES if any(_status(r) == s for r in group)]
    statuses = f1.multiselect("Status", present_statuses, default=present_statuses, key="samples_status",
                              help="e.g. keep only 'correct', or only 'timeout' / 'no_answer'")
    phases = sorted({r.key.phase for r in group})
    chosen_phases = f2.multiselect("Phase", phases, default=phases, key="samples_phase")
    show_formulas = f3.toggle("Formulas", value=True, key="samples_formulas")

    first = sample_of(group[0])
    st.markdown(f"**Problem** ({markdown_text(benchmark_title(benchmark))} / {inline_code(problem_id)})")
    st.markdown(markdown_text(first.problem or "_(no problem text in the sample lines)_"))
    st.markdown("**Gold answer**")
    st.code(first.gold, language=None)
    counts = Counter(_status(r) for r in group)
    st.caption(" · ".join(f"{ICONS[s]} {s}: {counts[s]}" for s in STATUSES if counts[s]))

    shown = [r for r in group if _status(r) in statuses and r.key.phase in chosen_phases
             and (flag is None or flag in _audit(r))]
    if not shown:
        st.info("No rollout matches the filters.")
        return
    _rollouts(shown, group if show_formulas else None, diversity, benchmark, problem_id)


def _header(record: Record, div: dict[str, float]) -> str:
    """An expander's label: status, sample_idx, phase, extracted answer, diversity, length, truncation."""
    sample, status, extracted = sample_of(record), _status(record), _extracted(record)
    div_text = " · ".join(f"{k}={div[k]:.3f}" for k in HEADER_DIVERSITY if div.get(k) is not None)
    return (f"{ICONS[status]} #{record.key.sample_idx} [{record.key.phase}] {status} · extracted: "
            f"{markdown_text(extracted[:60]) if extracted is not None else '—'}"
            + (f" · {div_text}" if div_text else "")
            + (f" · {sample.n_completion_tokens} tok" if sample.n_completion_tokens is not None else "")
            + (" · hit the token limit" if sample.finish_reason == "length" else "")
            + (" · reasoning unclosed" if isinstance(record, GradedSample) and record.reasoning_state == "unclosed"
               else "")
            + (f" · audit: {', '.join(_audit(record))}" if _audit(record) else ""))


def _rollouts(shown: list[Record], formula_group: list[Record] | None,
              diversity: dict[SampleKey, dict[str, float]], benchmark: str, problem_id: str) -> None:
    """One expander per shown rollout (formula chips when ``formula_group`` is given), and a CSV download."""
    # D_eq view: which formulas each rollout shares with the others of its phase group.
    sets = {r.key: formula_set(sample_of(r).completion) for r in formula_group} if formula_group is not None else {}
    holders_by_phase: dict[str, Counter] = {}
    for key, s in sets.items():
        holders_by_phase.setdefault(key.phase, Counter()).update(s)
    if len(shown) > MAX_ROLLOUTS_SHOWN:
        st.caption(f"Showing the first {MAX_ROLLOUTS_SHOWN} of {len(shown)} rollouts.")
    table = []
    for r in shown[:MAX_ROLLOUTS_SHOWN]:
        sample, div = sample_of(r), diversity.get(r.key, {})
        with st.expander(_header(r, div), expanded=False):
            if div:
                st.caption("Per-rollout diversity: " + ", ".join(
                    f"{k} = {v}" if isinstance(v, int) else f"{k} = {v:.4f}" for k, v in div.items()))
            if formula_group is not None:
                own = sets.get(r.key, frozenset())
                if own:
                    st.markdown("Formulas (green: in no other rollout of this problem → counts toward D_eq): "
                                + _formula_chips(own, holders_by_phase[r.key.phase]), unsafe_allow_html=True)
                else:
                    st.caption("No formulas extracted.")
            if isinstance(r, GradedSample) and r.reasoning_state in ("closed", "unclosed"):
                # a thinking model: the answer part is what was graded; the reasoning is shown apart
                st.caption(f"Reasoning ({r.reasoning_state}; not graded)")
                st.code(rollout_text(r, "reasoning"), language=None, wrap_lines=True)
                st.caption("Answer (graded)")
                st.code(r.answer_text, language=None, wrap_lines=True)
            else:
                st.code(sample.completion, language=None, wrap_lines=True)
        table.append({"benchmark": benchmark, "problem_id": problem_id, "phase": r.key.phase,
                      "sample_idx": r.key.sample_idx, "status": _status(r), "extracted": _extracted(r),
                      "audit": ", ".join(_audit(r)),
                      "finish_reason": sample.finish_reason, "n_completion_tokens": sample.n_completion_tokens,
                      **div, "completion": sample.completion})
    st.download_button("Download these rollouts (CSV)", pd.DataFrame(table).to_csv(index=False),
                       file_name=f"samples_{benchmark}_{problem_id}.csv".replace("/", "_"), mime="text/csv",
                       key="samples_download")
