"""Training dynamics: the trainer's metrics.jsonl of one or more runs, overlaid (GRPO vs DAPO vs DSDR)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from dashboards import charts, data
from dashboards.views.common import display_labels, pick_runs, train_frame

# (title, keys, y-axis title). Similarity = 1 - diversity, as the DSDR paper plots it.
PANELS = (
    ("Reward and accuracy", ["reward/mean", "acc/mean", "shaped_reward/mean"], "mean per rollout"),
    ("Policy entropy", ["entropy/mean"], "nats / token"),
    ("Semantic and formula similarity (1 - diversity)", ["similarity/semantic", "similarity/formula"], "similarity"),
    ("Response length", ["response_length/mean", "response_length/max"], "tokens"),
    ("Clip ratio (length-truncated responses)", ["response_length/clip_ratio"], "fraction"),
    ("Policy-gradient loss", ["loss/pg", "loss/local", "loss/total"], "loss"),
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
        return
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
