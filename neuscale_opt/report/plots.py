"""Report figures (matplotlib, Agg backend). Each function takes plain tables and returns PNG bytes.

Deterministic: fixed sizes, fixed colour per chip generation, sorted inputs, no timestamps in the
PNG metadata, so the same plan draws the same bytes.
"""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

CHIP_COLOURS = {
    "tpu-v4": "#1f77b4",
    "tpu-v5e": "#ff7f0e",
    "tpu-v5p": "#2ca02c",
    "tpu-v6e": "#d62728",
    "tpu7x": "#9467bd",
    "nvidia-a100-80gb": "#8c564b",
    "nvidia-h100": "#e377c2",
    "nvidia-h200": "#7f7f7f",
    "nvidia-b200": "#bcbd22",
}


def colour(chip: str) -> str:
    return CHIP_COLOURS.get(chip, "#17becf")


def to_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def _groups(alloc: pd.DataFrame) -> pd.DataFrame:
    """One row per (epoch, vPod group) with its vPod count (pooled groups counted once)."""
    if alloc.empty:
        return pd.DataFrame(columns=["epoch", "vpod_group", "chip", "n_vpods", "chips"])
    g = alloc.drop_duplicates(["epoch", "vpod_group"])[["epoch", "vpod_group", "chip", "chips_per_vpod", "n_vpods"]]
    g = g.assign(chips=g["chips_per_vpod"] * g["n_vpods"])
    return g


def vpods_over_epochs(alloc: pd.DataFrame, epochs: list[int]) -> bytes:
    """Stacked bars: vPods per group over epochs."""
    fig, ax = plt.subplots(figsize=(10, 4.4))
    g = _groups(alloc)
    if g.empty:
        ax.text(0.5, 0.5, "no vPods", ha="center", va="center", transform=ax.transAxes)
    else:
        # one colour per (class, generation, slice): batch and parallelism variants stack together
        first = alloc.drop_duplicates(["epoch", "vpod_group"]).set_index(["epoch", "vpod_group"])
        g = g.assign(
            label=[
                f"{first.loc[(e, v), 'bucket']} {first.loc[(e, v), 'chip']} {first.loc[(e, v), 'shape']}"
                for e, v in zip(g["epoch"], g["vpod_group"], strict=True)
            ]
        )
        piv = g.pivot_table(index="epoch", columns="label", values="n_vpods", aggfunc="sum", fill_value=0)
        piv = piv.reindex(epochs, fill_value=0)
        piv = piv[sorted(piv.columns)]
        bottom = np.zeros(len(piv))
        cmap = plt.get_cmap("tab20")
        for i, col in enumerate(piv.columns):
            ax.bar(piv.index, piv[col].to_numpy(), bottom=bottom, color=cmap(i % 20), label=str(col))
            bottom += piv[col].to_numpy()
        if len(piv.columns) <= 24:
            ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _integer_epochs(ax)
    ax.set_xlabel("epoch")
    ax.set_ylabel("vPods")
    ax.set_title("vPods per group over epochs")
    fig.tight_layout()
    return to_png(fig)


def _no_minor_labels(ax) -> None:
    """Log axes: label decades only (minor-tick labels overlap on narrow panels)."""
    from matplotlib.ticker import NullFormatter

    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())


def _integer_epochs(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def chips_vs_inventory(alloc: pd.DataFrame, epochs: list[int], inventory: dict[str, float]) -> bytes:
    """Chips held per generation per epoch, with the healthy inventory as a dashed line."""
    chips = sorted(inventory)
    fig, axes = plt.subplots(1, len(chips), figsize=(3.0 * len(chips) + 1, 3.4), squeeze=False)
    g = _groups(alloc)
    for ax, chip in zip(axes[0], chips, strict=True):
        used = g[g["chip"] == chip].groupby("epoch")["chips"].sum().reindex(epochs, fill_value=0)
        ax.bar(used.index, used.to_numpy(), color=colour(chip))
        inv = inventory[chip]
        if math.isfinite(inv):
            ax.axhline(inv, color="black", linestyle="--", linewidth=1, label="healthy chips")
            ax.set_ylim(0, max(inv, float(used.max() if len(used) else 0)) * 1.1 + 1)
        ax.set_title(chip, fontsize=9)
        ax.set_xlabel("epoch")
        _integer_epochs(ax)
    axes[0][0].set_ylabel("chips held")
    fig.suptitle("Chips used per generation against inventory", fontsize=10)
    fig.tight_layout()
    return to_png(fig)


def energy_money_per_epoch(by_epoch: pd.DataFrame) -> bytes:
    fig, ax1 = plt.subplots(figsize=(8, 3.6))
    e = by_epoch.sort_values("epoch")
    ax1.bar(e["epoch"] - 0.2, e["energy_j"] / 3.6e6, width=0.4, color="#1f77b4", label="energy (kWh)")
    ax1.set_ylabel("energy (kWh, incl. PUE)")
    ax1.set_xlabel("epoch")
    ax2 = ax1.twinx()
    ax2.bar(e["epoch"] + 0.2, e["cost_usd"], width=0.4, color="#ff7f0e", label="money (USD)")
    ax2.set_ylabel("money (USD)")
    h1, l1 = ax1.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax1.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    ax1.set_title("Energy and money per epoch")
    _integer_epochs(ax1)
    fig.tight_layout()
    return to_png(fig)


def pareto_candidates(table: pd.DataFrame, chosen: set[str], phase: str = "colocated", max_buckets: int = 6) -> bytes:
    """Latency vs energy per request of feasible candidates, coloured by generation, per class;
    Pareto-optimal points outlined, the plan's chosen configurations marked with a star."""
    t = table[table["feasible"] & (table["phase"] == phase)]
    buckets = list(dict.fromkeys(t["bucket"]))[:max_buckets]
    n = max(len(buckets), 1)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, b in zip(axes.flat, buckets, strict=False):
        tb = t[t["bucket"] == b]
        for chip, tc in tb.groupby("chip", sort=True):
            ax.scatter(tc["latency_s"], tc["energy_j_per_req"], s=6, alpha=0.35, color=colour(chip), label=chip)
            pf = tc[tc["pareto_energy"]]
            ax.scatter(pf["latency_s"], pf["energy_j_per_req"], s=18, facecolors="none", edgecolors=colour(chip))
        ch = tb[tb["config_id"].isin(chosen)]
        if not ch.empty:
            ax.scatter(ch["latency_s"], ch["energy_j_per_req"], s=120, marker="*", color="black", label="chosen")
        ax.set_xscale("log")
        ax.set_yscale("log")
        _no_minor_labels(ax)
        ax.set_title(f"{b}", fontsize=9)
        ax.set_xlabel("latency (s)", fontsize=8)
        ax.set_ylabel("energy per request (J)", fontsize=8)
    for ax in list(axes.flat)[len(buckets) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    uniq = dict(zip(labels, handles, strict=False))
    fig.legend(uniq.values(), uniq.keys(), fontsize=7, loc="lower right")
    fig.suptitle(f"Candidates ({phase}): latency vs energy per request; rings = Pareto front", fontsize=10)
    fig.tight_layout()
    return to_png(fig)


def rooflines(roofs: list[dict], classes: pd.DataFrame) -> bytes:
    """The three rooflines (FLOP/s, FLOP/J, FLOP/$) of each chip, request classes placed on them by
    arithmetic intensity (``classes``: bucket, chip, intensity)."""
    from neuscale_opt.roofline import roofline_curves

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    i = np.logspace(-1, 4, 200)
    titles = [("flop_per_s", "FLOP/s"), ("flop_per_j", "FLOP/J"), ("flop_per_usd", "FLOP/$")]
    for roof in roofs:
        cur = roofline_curves(roof, i)
        for ax, (key, _) in zip(axes, titles, strict=True):
            ax.plot(i, cur[key], color=colour(roof["chip"]), label=roof["chip"])
        if classes is not None and not classes.empty:
            mine = classes[classes["chip"] == roof["chip"]]
            if not mine.empty:
                pts = roofline_curves(roof, mine["intensity"].to_numpy())
                for ax, (key, _) in zip(axes, titles, strict=True):
                    ax.scatter(
                        mine["intensity"], pts[key], color=colour(roof["chip"]), s=25, zorder=3, edgecolors="black"
                    )
                    for x, y, b in zip(mine["intensity"], pts[key], mine["bucket"], strict=True):
                        ax.annotate(str(b), (x, y), fontsize=6, xytext=(3, -8), textcoords="offset points")
    for ax, (_, label) in zip(axes, titles, strict=True):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP per HBM byte)", fontsize=8)
        ax.set_ylabel(label, fontsize=8)
        ax.set_title(f"{label} roofline", fontsize=9)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return to_png(fig)


def pod_occupancy(pod_dims: tuple[int, ...], failed: list[tuple[int, ...]], slices: pd.DataFrame, title: str) -> bytes:
    """Which slice sits where in a 2-D pod (3-D pods drawn as their z-layers side by side); failed
    chips marked with a cross. ``slices``: rows with ``label`` and ``chips`` (list of coordinates)."""
    dims = tuple(pod_dims)
    layers = 1 if len(dims) == 2 else dims[2]
    fig, axes = plt.subplots(1, layers, figsize=(min(3.2 * layers, 16), 3.4), squeeze=False)
    cmap = plt.get_cmap("tab20")
    labels = sorted(set(slices["label"])) if not slices.empty else []
    for z, ax in enumerate(axes[0]):
        ax.set_xlim(0, dims[1])
        ax.set_ylim(dims[0], 0)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        for r in slices.itertuples():
            for c in r.chips:
                if len(c) == 3 and c[2] != z:
                    continue
                ax.add_patch(Rectangle((c[1], c[0]), 1, 1, color=cmap(labels.index(r.label) % 20), ec="white", lw=0.3))
        for f in failed:
            if len(f) == 3 and f[2] != z:
                continue
            ax.plot([f[1] + 0.1, f[1] + 0.9], [f[0] + 0.1, f[0] + 0.9], color="black", lw=1)
            ax.plot([f[1] + 0.9, f[1] + 0.1], [f[0] + 0.1, f[0] + 0.9], color="black", lw=1)
        if layers > 1:
            ax.set_title(f"z={z}", fontsize=7)
    if labels:
        from matplotlib.patches import Patch

        handles = [Patch(color=cmap(i % 20), label=lab) for i, lab in enumerate(labels)]
        fig.legend(handles=handles, fontsize=6, loc="lower center", ncol=min(4, len(labels)))
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.12 if labels else 0, 1, 1))
    return to_png(fig)
