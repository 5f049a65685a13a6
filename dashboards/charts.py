"""Plotly figures for the dashboard (pure functions of pandas frames; no Streamlit here).

Why Plotly rather than Altair: Pass@k needs a log2 x-axis with the k values as ticks and a
shaded CI band per run (``fill="toself"`` polygons), and the training page overlays many runs with
one unified hover per step; Plotly does both directly, renders large step counts with WebGL when
needed, and its figures are the ones the app's CSV downloads describe. Altair would need layered
specs and a Vega transform per band for the same result.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


def color_for(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def ema(series: pd.Series, alpha: float) -> pd.Series:
    """EMA with weight `alpha` on the past (0 = raw). Missing values stay missing."""
    if alpha <= 0:
        return series
    return series.ewm(alpha=1 - alpha, adjust=False, ignore_na=True).mean().where(series.notna())


def training_figure(frames: dict[str, pd.DataFrame], keys: list[str], *, title: str, smoothing: float = 0.0,
                    x: str = "step", y_title: str = "") -> go.Figure:
    """One line per run x key; colour = run, dash = key (the legend lists runs, the title the dashes)."""
    fig = go.Figure()
    dashes = ("solid", "dash", "dot", "dashdot")
    dash_words = ("solid", "dashed", "dotted", "dash-dot")
    for run_index, (label, frame) in enumerate(frames.items()):
        for key_index, key in enumerate(keys):
            if key not in frame or x not in frame or frame[key].notna().sum() == 0:
                continue
            sub = frame[[x, key]].dropna(subset=[key]).sort_values(x)
            fig.add_trace(go.Scatter(
                x=sub[x], y=ema(sub[key], smoothing), mode="lines+markers" if len(sub) < 40 else "lines",
                name=label, showlegend=key_index == 0, legendgroup=label,
                line={"color": color_for(run_index), "dash": dashes[key_index % len(dashes)]}, marker={"size": 4},
                hovertemplate=f"{label}<br>{x}=%{{x}}<br>{key}=%{{y:.4g}}<extra></extra>"))
            if smoothing > 0:  # the raw values stay visible, faint, under the smoothed line
                fig.add_trace(go.Scatter(x=sub[x], y=sub[key], mode="lines", showlegend=False, hoverinfo="skip",
                                         line={"color": _rgba(color_for(run_index), 0.25), "width": 1,
                                               "dash": dashes[key_index % len(dashes)]}, legendgroup=label))
    subtitle = ", ".join(f"{dash_words[i % 4]}: {k}" for i, k in enumerate(keys)) if len(keys) > 1 else keys[0] if keys else ""
    fig.update_layout(title={"text": title, "subtitle": {"text": subtitle, "font": {"size": 11}}},
                      xaxis_title=x, yaxis_title=y_title, hovermode="x unified",
                      height=340, margin={"l": 10, "r": 10, "t": 60, "b": 10},
                      legend={"font": {"size": 10}, "orientation": "h", "yanchor": "top", "y": -0.25})
    return fig


def _ci_band(fig: go.Figure, pts: list[dict[str, Any]], x: str, color: str, label: str, scale: float = 100) -> None:
    """The shaded 95% CI band (x ``scale``: % by default) of points with ``ci95_lo`` / ``ci95_hi``;
    none if any CI is missing."""
    if pts and all(p["ci95_lo"] is not None and p["ci95_hi"] is not None for p in pts):
        band_x = [p[x] for p in pts] + [p[x] for p in reversed(pts)]
        band_y = [scale * p["ci95_hi"] for p in pts] + [scale * p["ci95_lo"] for p in reversed(pts)]
        fig.add_trace(go.Scatter(x=band_x, y=band_y, mode="lines", fill="toself", fillcolor=_rgba(color, 0.15),
                                 line={"width": 0}, hoverinfo="skip", showlegend=False, legendgroup=label))


def step_figure(records: list[dict[str, Any]], metric: str, title: str, y_title: str, *,
                percent: bool = True) -> go.Figure:
    """One eval metric of each sweep against training step (a fraction shown in %, or the raw value),
    with its 95% CI band where the records carry one.

    records: {"sweep", "step", "checkpoint", "metric", "value", "ci95_lo", "ci95_hi"} (long format)."""
    fig = go.Figure()
    rows = [r for r in records if r["metric"] == metric and r["value"] is not None]
    for index, label in enumerate(dict.fromkeys(r["sweep"] for r in rows)):
        pts = sorted((r for r in rows if r["sweep"] == label), key=lambda r: r["step"])
        color = color_for(index)
        scale = 100 if percent else 1
        _ci_band(fig, pts, "step", color, label, scale)
        fig.add_trace(go.Scatter(x=[p["step"] for p in pts], y=[scale * p["value"] for p in pts], mode="lines+markers",
                                 name=label, line={"color": color}, legendgroup=label,
                                 text=[p["checkpoint"] for p in pts],
                                 hovertemplate=label + "<br>step %{x} (%{text}): %{y:.3g}"
                                 + ("%" if percent else "") + "<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="training step", yaxis_title=y_title, hovermode="x unified",
                      height=330, margin={"l": 10, "r": 10, "t": 40, "b": 10},
                      legend={"font": {"size": 10}, "orientation": "h", "yanchor": "top", "y": -0.25})
    return fig


def pass_at_k_figure(records: list[dict[str, Any]], benchmark: str, title: str) -> go.Figure:
    """Pass@k of every run on one benchmark: k on a log2 axis, 95% CI band per run."""
    fig = go.Figure()
    labels = list(dict.fromkeys(r["label"] for r in records))
    ks = sorted({r["k"] for r in records if r["benchmark"] == benchmark})
    for index, label in enumerate(labels):
        pts = sorted((r for r in records if r["label"] == label and r["benchmark"] == benchmark), key=lambda r: r["k"])
        if not pts:
            continue
        color = color_for(index)
        _ci_band(fig, pts, "k", color, label)
        fig.add_trace(go.Scatter(x=[p["k"] for p in pts], y=[100 * p["value"] for p in pts], mode="lines+markers",
                                 name=label, line={"color": color}, legendgroup=label,
                                 hovertemplate=label + "<br>Pass@%{x}: %{y:.1f}%<extra></extra>"))
    fig.update_xaxes(type="log", tickvals=ks, ticktext=[str(k) for k in ks], title="k (log2 scale)")
    fig.update_yaxes(title="Pass@k (%)")
    fig.update_layout(title=title, height=330, margin={"l": 10, "r": 10, "t": 40, "b": 10})
    return fig


def budget_curve_figure(records: list[dict[str, Any]], benchmark: str, title: str) -> go.Figure:
    """Accuracy against token budget of every run on one benchmark (log2 budget axis); dashed, same colour:
    the share of rollouts not finished by that budget (issue 45)."""
    fig = go.Figure()
    labels = list(dict.fromkeys(r["label"] for r in records))
    for index, label in enumerate(labels):
        pts = sorted((r for r in records if r["label"] == label and r["benchmark"] == benchmark),
                     key=lambda r: r["budget"])
        if not pts:
            continue
        color = color_for(index)
        budgets = [p["budget"] for p in pts]
        fig.add_trace(go.Scatter(x=budgets, y=[100 * p["accuracy"] for p in pts], mode="lines+markers", name=label,
                                 line={"color": color}, legendgroup=label,
                                 hovertemplate=label + "<br>budget %{x}: %{y:.1f}%<extra></extra>"))
        fig.add_trace(go.Scatter(x=budgets, y=[100 * p["not_finished"] for p in pts], mode="lines",
                                 name=f"{label} (not finished)", line={"color": color, "dash": "dash", "width": 1},
                                 legendgroup=label,
                                 hovertemplate=label + "<br>not finished by %{x}: %{y:.1f}%<extra></extra>"))
    fig.update_xaxes(type="log", title="token budget (log2 scale)")
    fig.update_yaxes(title="accuracy at budget (%)", range=[-2, 102])
    fig.update_layout(title=title, height=330, margin={"l": 10, "r": 10, "t": 40, "b": 10})
    return fig


def grouped_bars(frame: pd.DataFrame, *, x: str, y: str, color: str, title: str, y_title: str,
                 pattern: str | None = None) -> go.Figure:
    """Grouped bars (one group per `x`, one bar per `color` [x `pattern`])."""
    fig = go.Figure()
    labels = list(dict.fromkeys(frame[color]))
    patterns = list(dict.fromkeys(frame[pattern])) if pattern else [None]
    for index, label in enumerate(labels):
        for p_index, pat in enumerate(patterns):
            sub = frame[frame[color] == label]
            if pat is not None:
                sub = sub[sub[pattern] == pat]
            if sub.empty:
                continue
            fig.add_trace(go.Bar(x=sub[x], y=sub[y], name=label if pat is None else f"{label} ({pat})",
                                 marker={"color": color_for(index), "opacity": 1.0 if p_index == 0 else 0.55,
                                         "pattern": {"shape": "" if p_index == 0 else "/"}}))
    fig.update_layout(barmode="group", title=title, yaxis_title=y_title, height=330,
                      margin={"l": 10, "r": 10, "t": 40, "b": 10})
    return fig
