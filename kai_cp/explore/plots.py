"""Static matplotlib plots of the explore tables (they render anywhere, CI included).

Each function draws on the given axes (or a new figure) and returns the axes, so notebooks
can combine them; none computes anything the tables do not already hold.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

STATE_COLOURS = {"running": "#4c72b0", "new": "#55a868", "pipelined": "#8172b3", "evicted": "#c44e52",
                 "releasing": "#dd8452"}


def _axes(ax, size=(9, 4)):
    if ax is None:
        _, ax = plt.subplots(figsize=size)
    return ax


def _finite(series: pd.Series) -> pd.Series:
    return series.replace([math.inf, -math.inf], np.nan)


def fair_share(queues: pd.DataFrame, ax=None, title: str | None = None):
    """Per queue (indented by depth): deserved quota, fair share, allocated and requested."""
    ax = _axes(ax, (9, 0.32 * len(queues) + 1.2))
    labels = ["  " * int(d) + q for q, d in zip(queues.index, queues["depth"])]
    y = np.arange(len(queues))
    h = 0.2
    cols = [("deserved", "#bbbbbb"), ("fair_share", "#4c72b0"), ("allocated", "#55a868"), ("requested", "#dd8452")]
    for k, (col, colour) in enumerate(cols):
        if col in queues:
            ax.barh(y + (k - 1.5) * h, _finite(queues[col]).fillna(0), height=h, color=colour, label=col.replace("_", " "))
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(queues.attrs.get("unit", "gpu"))
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title or "Queues: quota, fair share, allocation, request")
    return ax


def what_if(table: pd.DataFrame, ax=None, title: str = "Fair share per scenario", unit: str = "gpu"):
    """Grouped bars: one group per row (queue), one bar per column (scenario)."""
    ax = _axes(ax, (9, 0.35 * len(table) + 1.5))
    table.plot.barh(ax=ax, width=0.8)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def solver_sweep(sweep: pd.DataFrame, metrics=("gpus_placed", "seconds"), axes=None):
    """One panel per metric against the time limit, a line per engine."""
    if axes is None:
        _, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 3.5))
    for ax, metric in zip(np.atleast_1d(axes), metrics):
        for engine, part in sweep.groupby("engine"):
            ax.plot(part["time_limit"], part[metric].astype(float), marker="o", label=engine)
        limits = sorted(sweep["time_limit"].unique())
        ax.set_xscale("log")
        ax.set_xticks(limits, [f"{t:g}" for t in limits])
        ax.minorticks_off()
        ax.set_xlabel("time limit (s)")
        ax.set_title(metric.replace("_", " "))
        ax.legend(fontsize=8)
    return axes


def domain_tree(domains: pd.DataFrame, ax=None, value: str = "gpus_idle", title: str | None = None):
    """The topology as an icicle: one row per level, each domain a box as wide as its GPUs,
    shaded and labelled by `value` (idle GPUs, or GPUs placed by a cycle)."""
    ax = _axes(ax, (12, 0.9 * domains["depth"].nunique() + 1))
    total = domains[domains["depth"] == 0]["gpus"].sum() or 1
    vmax = max(1.0, float(domains[value].max()))
    cmap = plt.get_cmap("Greens")
    for depth, level in domains.groupby("depth"):
        x = 0.0
        for row in level.sort_values("domain").itertuples():
            w = row.gpus / total
            v = float(getattr(row, value))
            ax.add_patch(plt.Rectangle((x, -depth - 1), w, 0.9, facecolor=cmap(0.15 + 0.85 * v / vmax),
                                       edgecolor="white"))
            if w > 0.02:
                label = f"{row.domain.rsplit('.', 1)[-1]}\n{v:.4g}" if w > 0.06 else f"{v:.4g}"
                ax.text(x + w / 2, -depth - 0.55, label, ha="center", va="center", fontsize=7,
                        color="white" if v > 0.55 * vmax else "black")
            x += w
    levels = domains.drop_duplicates("depth").sort_values("depth")
    ax.set_yticks([-d - 0.55 for d in levels["depth"]], levels["level"], fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_ylim(-len(levels) - 0.1, 0)
    ax.set_xticks([])
    ax.set_title(title or f"{value.replace('_', ' ')} per domain (width: GPUs)")
    return ax


def shared_devices(devices: pd.DataFrame, ax=None, title: str = "Shared GPUs: memory per pod", limit: int = 40):
    """Stacked fractions per shared device, coloured by the pod's state."""
    ax = _axes(ax, (12, 3.5))
    names = list(dict.fromkeys(devices["node"] + "/" + devices["device"].str[:6]))[:limit]
    devices = devices.assign(label=devices["node"] + "/" + devices["device"].str[:6])
    bottoms = dict.fromkeys(names, 0.0)
    for row in devices.itertuples():
        if row.label not in bottoms:
            continue
        ax.bar(row.label, row.fraction, bottom=bottoms[row.label], color=STATE_COLOURS.get(row.state, "#999999"),
               edgecolor="white")
        bottoms[row.label] += row.fraction
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("share of device memory")
    ax.tick_params(axis="x", rotation=90, labelsize=6)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for s, c in STATE_COLOURS.items() if s in set(devices["state"])]
    ax.legend(handles, [s for s in STATE_COLOURS if s in set(devices["state"])], fontsize=8, loc="upper right")
    ax.set_title(title)
    return ax


def convergence(allocation: pd.DataFrame, fair_share: pd.DataFrame, ax=None, top: int = 8,
                title: str = "Allocation (solid) against fair share (dashed)"):
    """Allocated per cycle for the queues with the most fair share, each with its fair share."""
    ax = _axes(ax, (10, 4.5))
    queues = fair_share.iloc[-1].sort_values(ascending=False).index[:top]
    colours = plt.get_cmap("tab10")
    for k, q in enumerate(queues):
        ax.plot(allocation.index, allocation[q], color=colours(k % 10), label=q)
        ax.plot(fair_share.index, fair_share[q], color=colours(k % 10), linestyle="--", linewidth=0.9)
    ax.set_xlabel("cycle")
    ax.set_ylabel("gpu")
    ax.legend(fontsize=8, ncol=2)
    ax.set_title(title)
    return ax
