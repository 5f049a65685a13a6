"""Evaluation: Table 1 view, Pass@k curves, diversity and judge scores of the chosen runs.

Every number comes from each run's ``RunResults`` (``dsdr_eval.rundir.results.load_run``, the reader
`dsdr-eval report` uses), laid out by the report's shared Table 1 and formatting helpers
(dsdr_eval.reporting.tables), so the dashboard and a report never disagree.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from dashboards import charts, data
from dashboards.views.common import pick_runs, run_results
from dsdr_eval.rundir import records, results
from dsdr_eval.rundir.budget_curves import budget_curve_records
from dsdr_eval.reporting import reference, tables
from dsdr_eval.reporting.runs import benchmark_title, protocol_differences, protocol_notes
from dsdr_eval.rundir.results import AVERAGE, RunResults


def _title(bench: str) -> str:
    return "Average" if bench == AVERAGE else benchmark_title(bench)


def _protocol_frame(runs: list[RunResults]) -> pd.DataFrame:
    rows = []
    for run in runs:
        p, settings = run.protocol, run.settings
        rows.append({"run": run.label, "directory": str(run.path), "model": run.model,
                     "phases (n, T, top-p)": "; ".join(ph.describe() for ph in p.phases),
                     "max tokens": p.max_tokens, "seed": p.seed, "template": settings.template_name,
                     "backend": f"{settings.backend or '?'} {settings.backend_version or ''}".strip(),
                     "benchmarks": ", ".join(f"{benchmark_title(b)} ({e.n_problems})"
                                             for b, e in run.benchmarks.items())})
    return pd.DataFrame(rows)


def _table1_frame(table: tables.Table1, digits: int, with_ci: bool) -> pd.DataFrame:
    rows = []
    for row in table.rows:
        record = {"run": row.label, "source": row.source}
        for bench in [*table.benchmarks, AVERAGE]:
            for metric in table.metrics:
                record[f"{_title(bench)} {tables.metric_title(metric)}"] = tables.format_value(
                    row.cells.get((bench, metric)), digits=digits, with_ci=with_ci)
        rows.append(record)
    return pd.DataFrame(rows)


def _loaded_runs(chosen: list[data.RunEntry]) -> list[RunResults]:
    loaded = []
    for entry in chosen:
        result = run_results(entry)
        if result.ok:
            loaded.append(result.value)
        else:
            st.error(result.error, icon=":material/error:")
    return loaded


def render(root: Path, runs: list[data.RunEntry], requested: list[data.RunEntry] | None) -> None:
    st.title("Evaluation")
    evals = [r for r in runs if r.kind == "eval"]
    if not evals:
        st.info(f"No evaluation runs under `{root}`. Make one with `dsdr-eval run --model MODEL --benchmarks "
                f"math500 --protocol quick --limit 8 --out {root}/NAME` (it is scored at the end; add diversity "
                "with `dsdr-eval diversity` and judge scores with `dsdr-eval judge`).")
        return
    loaded = _loaded_runs(pick_runs("Evaluation runs", evals, requested, key="eval_runs"))
    if not loaded:
        st.info("Pick at least one scored evaluation run above.")
        return
    st.subheader("Protocol")
    st.dataframe(_protocol_frame(loaded), hide_index=True, width="stretch")
    differences = protocol_differences(loaded)
    if differences:
        st.warning("These runs were evaluated with different protocols; differences mix model and protocol "
                   "effects:\n\n" + "\n".join(f"- {d}" for d in differences))
    for note in protocol_notes(loaded):
        st.caption(note)

    passk = records.pass_at_k_records(loaded)
    tab_table, tab_passk, tab_budget, tab_div, tab_judge = st.tabs(["Table 1", "Pass@k", "Token budget", "Diversity",
                                                                     "Judge"])
    with tab_table:
        _table1_tab(loaded)
    with tab_passk:
        _passk_tab(passk)
    with tab_budget:
        _budget_tab(loaded)
    with tab_div:
        _diversity_tab(records.diversity_records(loaded), loaded)
    with tab_judge:
        _judge_tab(records.judge_records(loaded), passk)


def _table1_tab(loaded: list[RunResults]) -> None:
    c1, c2, c3 = st.columns(3)
    ref_options = ["none", "paper", "paper:all"] + [f"paper:{b}" for b in reference.block_ids()]
    ref_spec = c1.selectbox("Published reference rows", ref_options, key="eval_reference",
                            help="'paper' = the DSDR Table 1 block of the runs' backbone (all blocks if none matches)")
    avg_choice = c2.selectbox("Second number", ["auto", "avg@16", "avg@n", "avg@64"], key="eval_avg")
    with_ci = c3.checkbox("Show 95% CIs", value=False, key="eval_ci")
    avg_metric, avg_notes = tables.choose_avg_metric(loaded, avg_choice)
    ref_rows = reference.select_reference(None if ref_spec == "none" else ref_spec,
                                          model_hints=[r.model or "" for r in loaded])
    table = tables.build_table1(loaded, ref_rows, avg_metric=avg_metric)
    st.caption(f"{tables.metric_title(table.metrics[0])} / {tables.metric_title(table.metrics[1])} in %, "
               "from metrics.json; published rows as printed in the DSDR paper (not computed here).")
    st.dataframe(_table1_frame(table, 1, with_ci), hide_index=True, width="stretch")
    for note in [*avg_notes, *table.notes]:
        st.caption(note)
    d1, d2, d3 = st.columns(3)
    d1.download_button("table1.csv", tables.to_csv(table), file_name="table1.csv", mime="text/csv",
                       key="dl_table_csv")
    d2.download_button("table1.md", tables.to_markdown(table, with_ci=with_ci), file_name="table1.md",
                       key="dl_table_md")
    d3.download_button("table1.tex", tables.to_latex(table, with_ci=with_ci), file_name="table1.tex",
                       key="dl_table_tex")


def _passk_tab(passk: list[dict]) -> None:
    if not passk:
        st.info("No Pass@k in these runs' metrics.json (the sampling phase needs n >= 1 rollouts per problem).")
        return
    benches = list(dict.fromkeys(r["benchmark"] for r in passk))
    columns = st.columns(2)
    for index, bench in enumerate(benches):
        columns[index % 2].plotly_chart(charts.pass_at_k_figure(passk, bench, _title(bench)), width="stretch",
                                        key=f"passk_{bench}")
    st.caption("Unbiased Pass@k estimator; shaded: 95% bootstrap CI from metrics.json.")
    st.download_button("passk.csv", tables.records_to_csv(passk), file_name="passk.csv", mime="text/csv",
                       key="dl_passk")


def _budget_tab(loaded: list[RunResults]) -> None:
    """Accuracy against token budget (issue 45): each run's curve from its own samples, per benchmark."""
    records = budget_curve_records(loaded)
    for run in loaded:
        for name, bench in run.benchmarks.items():
            if bench.budget_curve_unavailable:
                st.caption(f"{run.label} / {name}: no budget curve: {bench.budget_curve_unavailable}")
    if not records:
        st.info("No budget curve in these runs' metrics.json (score them again with this version).")
        return
    columns = st.columns(2)
    for index, bench in enumerate(dict.fromkeys(r["benchmark"] for r in records)):
        columns[index % 2].plotly_chart(charts.budget_curve_figure(records, bench, _title(bench)), width="stretch",
                                        key=f"budget_{bench}")
    st.caption("At budget b a rollout counts as correct only when correct and finished within b tokens: the rollout "
               "a run at budget b would generate with the same seed (docs/evaluate.md, Token budgets). Dashed: the "
               "share not finished by b.")
    st.download_button("budget_curve.csv", tables.records_to_csv(records), file_name="budget_curve.csv",
                       mime="text/csv", key="dl_budget")


def _diversity_tab(diversity: list[dict], loaded: list) -> None:
    if not diversity:
        st.info("No diversity in these runs' metrics.json yet: run `dsdr-eval diversity RUN_DIR`.")
        return
    # the validity line (dsdr_eval.diversity_metrics.validity): what each number measured
    for run in loaded:
        for bench, result in run.benchmarks.items():
            for warning in result.diversity.warnings if result.diversity is not None else ():
                # shown as written: a warning quotes delimiters ($..$), which Markdown would render as math
                st.warning(tables.md_prose(f"{run.label} / {benchmark_title(bench)}: {warning}"))
    frame = pd.DataFrame(diversity)
    frame["benchmark"] = frame["benchmark"].map(benchmark_title)
    frame["subset"] = frame["subset"].map({"all": "all", "correct": "correct only"})
    columns = st.columns(2)
    for index, measure in enumerate(m for m in results.DIVERSITY_MEASURES if m in set(frame["measure"])):
        sub = frame[frame["measure"] == measure]
        title = f"{measure.capitalize()} " + ("score" if measure == "vendi" else "diversity")
        columns[index % 2].plotly_chart(
            charts.grouped_bars(sub, x="benchmark", y="value", color="label", pattern="subset",
                                title=title, y_title=measure),
            width="stretch", key=f"div_{measure}")
    st.dataframe(frame, hide_index=True, width="stretch")
    st.download_button("diversity.csv", tables.records_to_csv(diversity), file_name="diversity.csv",
                       mime="text/csv", key="dl_div")
    # the hack watch (issue 47): what a diversity number could be bought by, per run -- text after the
    # answer (cut away), the token cap, a dropped closing $, solutions D_eq cannot read
    validity = records.validity_records(loaded)
    if validity:
        st.subheader("What the numbers measured: validity line and hack watch")
        st.caption("Shares of each run's rollouts: cut at their final answer, characters removed by the cut, at the "
                   "token cap, with long text after the answer, with an unbalanced $ in the solution, with no formula "
                   "D_eq reads (D_eq counts them 0), and the share of tokens the encoder read. Blank: the run's "
                   "diversity was measured before that share existed (`dsdr-eval diversity RUN_DIR` adds it).")
        vframe = pd.DataFrame(validity)
        vframe["benchmark"] = vframe["benchmark"].map(benchmark_title)
        st.dataframe(vframe, hide_index=True, width="stretch")


def _judge_tab(judge: list[dict], passk: list[dict]) -> None:
    if not judge:
        st.info("No judge scores in these runs' metrics.json yet: run `dsdr-eval judge RUN_DIR ...`.")
        return
    frame = pd.DataFrame(judge)
    frame["benchmark"] = frame["benchmark"].map(benchmark_title)
    left, right = st.columns(2)
    left.plotly_chart(charts.grouped_bars(frame, x="benchmark", y="overall", color="label",
                                          title="LLM-judge diversity (overall, 0-10)", y_title="score"),
                      width="stretch", key="judge_overall")
    ks = sorted({r["k"] for r in passk})
    k = 32 if 32 in ks else (max([x for x in ks if x <= 32], default=None))
    if k is not None:
        pk = pd.DataFrame([{**r, "value": 100 * r["value"]} for r in passk
                           if r["k"] == k and r["benchmark"] != AVERAGE])
        pk["benchmark"] = pk["benchmark"].map(benchmark_title)
        right.plotly_chart(charts.grouped_bars(pk, x="benchmark", y="value", color="label",
                                               title=f"Pass@{k} (%)", y_title="%"),
                           width="stretch", key="judge_pass")
        if k != 32:
            right.caption(f"Pass@32 needs 32 rollouts per problem; showing Pass@{k}.")
    st.dataframe(frame, hide_index=True, width="stretch")
    st.download_button("judge.csv", tables.records_to_csv(judge), file_name="judge.csv", mime="text/csv",
                       key="dl_judge")
