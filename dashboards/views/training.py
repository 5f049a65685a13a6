"""Training dynamics: the trainer's metrics.jsonl of one or more runs, overlaid (GRPO vs DAPO vs DSDR)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from dashboards import charts, data
from dashboards.views.common import display_labels, pick_runs, run_results, train_frame
from dsdr_eval.rundir import sweepdir
from dsdr_eval.errors import DsdrError

# (title, keys, y-axis title). Similarity = 1 - diversity, as the DSDR paper plots it.
PANELS = (
    ("Reward and accuracy", ["reward/mean", "acc/mean", "shaped_reward/mean"], "mean per rollout"),
    ("Policy entropy", ["entropy/mean"], "nats / token"),
    ("Semantic and formula similarity (1 - diversity)", ["similarity/semantic", "similarity/formula"], "similarity"),
    ("Response length", ["response_length/mean", "response_length/max"], "tokens"),
    ("Clip ratio (length-truncated responses)", ["response_length/clip_ratio"], "fraction"),
    ("Policy-gradient loss", ["loss/pg", "loss/local", "loss/total"], "loss"),
    ("Coupling weights (Eq. 12, groups with >= 2 correct)", ["coupling/max", "coupling/entropy"],
     "max w / H(w) / log|P|"),
    ("Advantage statistics", ["adv/mean", "adv/std", "adv/min", "adv/max"], "advantage"),
    ("All-correct / all-wrong groups", ["groups/all_correct_frac", "groups/all_wrong_frac"], "fraction of groups"),
    ("PPO clip fraction", ["clip/frac", "clip/frac_low", "clip/frac_high"], "fraction of tokens"),
)
SUMMARY_KEYS = ("step", "reward/mean", "acc/mean", "entropy/mean", "similarity/semantic", "response_length/mean",
                "time/elapsed_s")


def render(root: Path, runs: list[data.RunEntry], requested: list[data.RunEntry] | None) -> None:
    st.title("Training dynamics")
    train = [r for r in runs if r.kind == "train"]
    if not train:
        st.info(f"No training runs under `{root}` (a training run has config.json with kind=train and a "
                "metrics.jsonl). Start one with `dsdr-train ... --out "
                f"{root}/NAME`; it appears here after its first step and this page follows it live.")
    else:
        _render_training(root, train, requested)
    _render_sweeps(root, runs, requested)


def _render_training(root: Path, train: list[data.RunEntry], requested: list[data.RunEntry] | None) -> None:
    chosen = pick_runs("Training runs (overlaid)", train, requested, key="train_runs")
    c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
    smoothing = c1.slider("Smoothing (EMA weight of the past)", 0.0, 0.99, 0.0, 0.01, key="train_smoothing",
                          help="0 = raw values; the raw line stays visible, faint, under a smoothed one")
    x_axis = c2.radio("x axis", ["step", "time/elapsed_s"], horizontal=True, key="train_x",
                      help="time/elapsed_s = the sum of the per-step wall times (time/total_s)")
    live = c3.toggle("Live refresh", value=True, key="train_live", help="re-read metrics.jsonl while a run writes")
    interval = c4.number_input("every (s)", min_value=2, max_value=600, value=10, step=1, key="train_interval")
    if not chosen:
        st.info("Pick at least one training run above.")
        return

    @st.fragment(run_every=f"{int(interval)}s" if live else None)
    def charts_fragment() -> None:
        labels = display_labels(chosen)
        frames: dict[str, pd.DataFrame] = {}
        for entry in chosen:
            loaded = train_frame(entry)
            if not loaded.ok:
                st.error(loaded.error, icon=":material/error:")
                continue
            for warning in loaded.warnings:
                st.caption(f"Warning: {warning}")
            frames[labels[entry.name]] = loaded.value
        if not frames:
            return
        summary = []
        for label, frame in frames.items():
            last = frame.sort_values("step").iloc[-1]
            summary.append({"run": label, "steps logged": len(frame),
                            **{k: last.get(k) for k in SUMMARY_KEYS if k in frame}})
        st.dataframe(pd.DataFrame(summary), hide_index=True, width="stretch")
        present = set().union(*(set(f.columns) for f in frames.values()))
        panels = [p for p in PANELS if any(k in present for k in p[1])]
        val_keys = sorted(k for k in present if k.startswith("val/"))
        if val_keys:
            panels.append(("Validation", val_keys, "value"))
        columns = st.columns(2)
        for index, (title, keys, y_title) in enumerate(panels):
            fig = charts.training_figure(frames, [k for k in keys if k in present], title=title,
                                         smoothing=smoothing, x=x_axis, y_title=y_title)
            columns[index % 2].plotly_chart(fig, width="stretch", key=f"train_chart_{index}")
        other = sorted(k for k in present if k not in {"step"} and not any(k in p[1] for p in panels))
        extra = st.multiselect("More metrics", other, key="train_more")
        if extra:
            st.plotly_chart(charts.training_figure(frames, extra, title="More metrics", smoothing=smoothing,
                                                   x=x_axis), width="stretch", key="train_chart_more")
        combined = pd.concat([f.assign(run=label) for label, f in frames.items()], ignore_index=True)
        st.download_button("Download metrics (CSV)", combined.to_csv(index=False), file_name="training_metrics.csv",
                           mime="text/csv", key="train_download")
        st.caption(f"Source: metrics.jsonl of {', '.join(e.name for e in chosen)} under `{root}`. "
                   + ("Refreshing every %d s." % interval if live else "Live refresh off."))

    charts_fragment()


# ----------------------------------------------------------------------------- checkpoint sweeps

# (metric id, panel title, y-axis title, in %): what a sweep plots against training step.
SWEEP_PANELS = (("pass1", "Pass@1 (the pass1 phase)", "%", True), ("avg@n", "Avg@n (pass@1 of the n samples)", "%", True),
                ("pass@max", "Pass@k at the largest k", "%", True),
                ("diversity/semantic", "Semantic diversity D_emb (all samples)", "D_emb", False),
                ("diversity/formula", "Formula diversity D_eq (all samples)", "D_eq", False))


def find_sweeps(root: Path, runs: list[data.RunEntry]) -> tuple[dict[str, tuple[dict[str, Any], dict[str, data.RunEntry]]], list[str]]:
    """Sweep directories (a sweep.json beside evaluation runs): name -> (sweep.json, run_dir -> entry),
    and the errors of the sweep.json files that could not be read."""
    by_parent: dict[Path, dict[str, data.RunEntry]] = {}
    for entry in runs:
        if entry.kind == "eval" and entry.path != root:
            by_parent.setdefault(entry.path.parent, {})[entry.path.name] = entry
    found, errors = {}, []
    for parent, members in sorted(by_parent.items()):
        if not (parent / sweepdir.SWEEP_FILE).exists() or not data.is_inside(root, parent):
            continue
        name = parent.relative_to(root).as_posix() if parent != root else "."
        try:
            data.resolve_file(root, parent / sweepdir.SWEEP_FILE)
            found[name] = (sweepdir.load_sweep(parent), members)
        except DsdrError as exc:
            errors.append(f"{name}: {exc}")
    return found, errors


def _bench_values(run: Any, benchmark: str) -> dict[str, tuple[float | None, tuple[float, float] | None]]:
    """metric id -> (value, CI) of one checkpoint's run on ``benchmark`` ("average": the macro mean)."""
    if benchmark == "average" and run.average is not None and len(run.benchmarks) > 1:
        scores, benches = run.average.scores, list(run.benchmarks.values())
    elif benchmark in run.benchmarks:
        scores, benches = run.benchmarks[benchmark].scores, [run.benchmarks[benchmark]]
    else:
        return {}
    out = {m: (scores.value(m), scores.interval(m)) for m in ("pass1", "avg@n")}
    ks = scores.at_k("pass")
    if ks:
        k = max(ks)
        out["pass@max"] = (ks[k], scores.interval(f"pass@{k}"))
        out["k"] = (float(k), None)
    for measure in ("semantic", "formula"):  # no CI in metrics.json; the average is the mean over benchmarks
        values = [b.diversity.value(measure) for b in benches if b.diversity is not None]
        values = [v for v in values if v is not None]
        if values and len(values) == len(benches):
            out[f"diversity/{measure}"] = (sum(values) / len(values), None)
    return out


def sweep_records(sweeps: dict[str, tuple[dict[str, Any], dict[str, data.RunEntry]]], benchmark: str,
                  labels: dict[str, str]) -> tuple[list[dict[str, Any]], list[str]]:
    """Long-format rows (sweep, step, checkpoint, metric, value, ci95_lo, ci95_hi) and the notes of
    checkpoints left out (not evaluated yet, no step, unreadable)."""
    records, notes = [], []
    for name, (record, members) in sweeps.items():
        for ckpt in record["checkpoints"]:
            entry = members.get(ckpt["run_dir"])
            if entry is None or ckpt["step"] is None:
                notes.append(f"{name}/{ckpt['run_dir']}: " + ("no step recorded" if entry else f"not evaluated yet ({ckpt['status']})"))
                continue
            loaded = run_results(entry)
            if not loaded.ok:
                notes.append(loaded.error)
                continue
            values = _bench_values(loaded.value, benchmark)
            k = values.pop("k", (None, None))[0]
            for metric, (value, ci) in values.items():
                lo, hi = ci or (None, None)
                records.append({"sweep": labels[name], "step": ckpt["step"], "checkpoint": ckpt["name"],
                                "metric": metric, "k": int(k) if metric == "pass@max" and k else None,
                                "value": value, "ci95_lo": lo, "ci95_hi": hi})
    return records, notes


def _render_sweeps(root: Path, runs: list[data.RunEntry], requested: list[data.RunEntry] | None) -> None:
    sweeps, errors = find_sweeps(root, runs)
    for error in errors:
        st.error(error, icon=":material/error:")
    if not sweeps:
        return
    st.header("Evaluation across checkpoints (sweeps)")
    names = list(sweeps)
    if requested is None:
        algos = {n: (record.get("train_run") or {}).get("algo") for n, (record, _) in sweeps.items()}
        wanted = data.default_selection(names, algos)
    else:  # ?run= naming a sweep or one of its checkpoints' runs selects that sweep
        asked = {entry.path for entry in requested}
        wanted = [n for n, (_, members) in sweeps.items() if asked & {e.path for e in members.values()}]
    chosen = st.multiselect("Sweeps (overlaid)", names, default=wanted, key="sweep_runs",
                            help="`dsdr-eval sweep TRAIN_RUN --out DIR`: one evaluation run per checkpoint")
    if not chosen:
        st.info("Pick at least one sweep above.")
        return
    picked = {n: sweeps[n] for n in chosen}
    loaded = [run_results(e) for _, members in picked.values() for e in members.values()]
    benchmarks = sorted({b for result in loaded if result.ok for b in result.value.benchmarks})
    benchmark = st.selectbox("Benchmark", ["average", *benchmarks] if len(benchmarks) > 1 else benchmarks,
                             key="sweep_benchmark")
    counts: dict[str, int] = {}
    for record, _ in picked.values():
        counts[str(record.get("label"))] = counts.get(str(record.get("label")), 0) + 1
    labels = {n: str(r.get("label")) if counts[str(r.get("label"))] == 1 else f"{r.get('label')} ({n})"
              for n, (r, _) in picked.items()}
    records, notes = sweep_records(picked, benchmark or "average", labels)
    for note in notes:
        st.caption(f"Left out: {note}")
    columns = st.columns(2)
    panels = [p for p in SWEEP_PANELS if any(r["metric"] == p[0] for r in records)]
    for index, (metric, title, y_title, percent) in enumerate(panels):
        ks = sorted({r["k"] for r in records if r["metric"] == metric and r["k"]})
        shown = f"{title} (k = {', '.join(map(str, ks))})" if ks else title
        columns[index % 2].plotly_chart(charts.step_figure(records, metric, shown, y_title, percent=percent),
                                        width="stretch", key=f"sweep_chart_{metric}")
    if records:
        st.download_button("Download sweep metrics (CSV)", pd.DataFrame(records).to_csv(index=False),
                           file_name="sweep_metrics.csv", mime="text/csv", key="sweep_download")
    st.caption("Shaded bands: the 95% bootstrap CIs of metrics.json; diversity has none (a mean over problems). "
               "Settings per sweep: " + "; ".join(f"{labels[n]}: {_settings_text(r)}" for n, (r, _) in picked.items()))


def _settings_text(record: dict[str, Any]) -> str:
    settings = record.get("eval") or {}
    keys = ("protocol", "n", "temperature", "top_p", "max_tokens", "seed", "benchmarks", "limit", "backend")
    return ", ".join(f"{k}={settings[k]}" for k in keys if settings.get(k) is not None)
