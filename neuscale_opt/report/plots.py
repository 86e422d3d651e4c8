"""Report figures (matplotlib, Agg backend). Each function takes plain tables and returns PNG bytes.

Conventions of every figure: colour = chip generation (:data:`CHIP_COLOURS`), hatch pattern =
request class (:func:`class_hatches`), at most 8 entries per legend, a legend on every panel,
time axes in clock time (``h:mm`` from the start of the horizon), energy in kWh and money in USD
or USD/h as in the report's tables.

Deterministic: fixed sizes, fixed colour per generation, sorted inputs, no timestamps in the PNG
metadata, so the same plan draws the same bytes.
"""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.collections import PatchCollection  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from neuscale_opt.report.fmt import J_PER_KWH, clock  # noqa: E402

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
HATCHES = ["", "///", "\\\\\\", "xxx", "...", "ooo", "+++"]
MAX_LEGEND = 8
UNUSED = "#e6e6e6"


def colour(chip: str) -> str:
    return CHIP_COLOURS.get(chip, "#17becf")


def to_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def class_hatches(classes) -> dict[str, str]:
    """A hatch per class (sorted); classes beyond the seventh share the last pattern as 'other'."""
    names = sorted({str(c) for c in classes})
    return {c: HATCHES[min(i, len(HATCHES) - 1)] for i, c in enumerate(names)}


def _class_handles(hatch: dict[str, str]) -> list[Patch]:
    names = sorted(hatch)
    shown = names if len(names) <= len(HATCHES) else names[: len(HATCHES) - 1]
    handles = [Patch(facecolor="white", edgecolor="#444", hatch=hatch[c], label=c) for c in shown]
    if len(names) > len(shown):
        handles.append(Patch(facecolor="white", edgecolor="#444", hatch=HATCHES[-1], label="other classes"))
    return handles


def _gen_handles(chips) -> list[Patch]:
    return [Patch(facecolor=colour(c), label=c) for c in sorted(chips)][:MAX_LEGEND]


def _clock_axis(ax, n: int, epoch_s: float, label: str = "time from start (h:mm)", max_labels: int = 12) -> None:
    """Epoch positions 0 .. n-1 labelled with their start in clock time (at most ``max_labels``)."""
    step = max(1, math.ceil(n / max_labels))
    ticks = list(range(0, n, step))
    ax.set_xticks(ticks)
    ax.set_xticklabels([clock(i * epoch_s) for i in ticks], fontsize=8)
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_xlabel(label, fontsize=8)


def main_class(alloc: pd.DataFrame) -> dict[tuple[int, str], str]:
    """(epoch, vPod group) -> the class carrying most of the group's traffic (pattern of the group)."""
    if alloc.empty:
        return {}
    t = alloc.sort_values(
        ["epoch", "vpod_group", "rate_rps", "bucket"], ascending=[True, True, False, True], kind="mergesort"
    )
    t = t.drop_duplicates(["epoch", "vpod_group"])
    return {(int(e), str(g)): str(b) for e, g, b in zip(t["epoch"], t["vpod_group"], t["bucket"], strict=True)}


def _groups(alloc: pd.DataFrame) -> pd.DataFrame:
    """One row per (epoch, vPod group) with its vPods, chips and main class."""
    cols = ["epoch", "vpod_group", "chip", "n_vpods", "chips", "bucket"]
    if alloc.empty:
        return pd.DataFrame(columns=cols)
    mc = main_class(alloc)
    g = alloc.drop_duplicates(["epoch", "vpod_group"])[["epoch", "vpod_group", "chip", "chips_per_vpod", "n_vpods"]]
    return g.assign(
        chips=g["chips_per_vpod"] * g["n_vpods"],
        bucket=[mc[(int(e), str(v))] for e, v in zip(g["epoch"], g["vpod_group"], strict=True)],
    )[cols]


def deployment_over_time(
    alloc: pd.DataFrame, epochs: list[int], epoch_s: float, classes: list[str] | None = None
) -> bytes:
    """Stacked bars of chips held per epoch: colour = generation, pattern = the class that carries
    most of each vPod group's traffic."""
    fig, ax = plt.subplots(figsize=(10, 4.2))
    g = _groups(alloc)
    pos = {t: i for i, t in enumerate(epochs)}
    if g.empty:
        ax.text(0.5, 0.5, "no vPods", ha="center", va="center", transform=ax.transAxes)
    else:
        hatch = class_hatches(classes or g["bucket"])
        drawn = set(g["bucket"])
        piv = g.pivot_table(index="epoch", columns=["chip", "bucket"], values="chips", aggfunc="sum", fill_value=0)
        piv = piv.reindex(epochs, fill_value=0)
        bottom = np.zeros(len(epochs))
        x = np.array([pos[t] for t in piv.index])
        for chip, bucket in sorted(piv.columns):
            v = piv[(chip, bucket)].to_numpy(dtype=float)
            ax.bar(x, v, bottom=bottom, color=colour(chip), hatch=hatch[bucket], edgecolor="white", linewidth=0.6)
            bottom += v
        leg1 = ax.legend(
            handles=_gen_handles(g["chip"].unique()),
            title="generation",
            fontsize=8,
            title_fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
        )
        ax.add_artist(leg1)
        ax.legend(
            handles=_class_handles({c: h for c, h in hatch.items() if c in drawn}),
            title="main class",
            fontsize=8,
            title_fontsize=8,
            loc="lower left",
            bbox_to_anchor=(1.0, 0.0),
        )
    _clock_axis(ax, len(epochs), epoch_s)
    ax.set_ylabel("chips held")
    ax.set_title("Deployment over time: chips held per generation and class", fontsize=10)
    fig.tight_layout()
    return to_png(fig)


def chips_vs_inventory(alloc: pd.DataFrame, epochs: list[int], inventory: dict[str, float], epoch_s: float) -> bytes:
    """Chips held per generation per epoch (one panel each), the healthy inventory dashed."""
    chips = sorted(inventory)
    fig, axes = plt.subplots(1, len(chips), figsize=(3.1 * len(chips) + 0.8, 3.4), squeeze=False)
    g = _groups(alloc)
    pos = np.arange(len(epochs))
    for ax, chip in zip(axes[0], chips, strict=True):
        used = g[g["chip"] == chip].groupby("epoch")["chips"].sum().reindex(epochs, fill_value=0)
        ax.bar(pos, used.to_numpy(dtype=float), color=colour(chip), label="chips held")
        inv = inventory[chip]
        top = float(used.max() if len(used) else 0)
        if math.isfinite(inv):
            ax.axhline(inv, color="black", linestyle="--", linewidth=1, label=f"healthy inventory ({inv:g})")
            top = max(top, inv)
        ax.set_ylim(0, top * 1.25 + 1)
        ax.legend(fontsize=7, loc="upper left")
        ax.set_title(chip, fontsize=9)
        _clock_axis(ax, len(epochs), epoch_s, max_labels=6)
    axes[0][0].set_ylabel("chips")
    fig.suptitle("Chips held per generation against the healthy inventory", fontsize=10)
    fig.tight_layout()
    return to_png(fig)


def energy_money_per_epoch(by_epoch: pd.DataFrame, epoch_s: float, demand: pd.DataFrame | None = None) -> bytes:
    """Left: energy per epoch (kWh) with the demand (req/s); right: money as an hourly rate (USD/h)."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6))
    e = by_epoch.sort_values("epoch")
    pos = np.arange(len(e))
    a1.bar(pos, e["energy_j"].to_numpy(dtype=float) / J_PER_KWH, color="#4c72b0", label="energy (kWh, PUE incl.)")
    a1.set_ylabel("energy per epoch (kWh)", fontsize=8)
    handles, labels = a1.get_legend_handles_labels()
    if demand is not None and not demand.empty:
        d = demand.set_index("epoch").reindex(e["epoch"])
        tw = a1.twinx()
        tw.plot(pos, d["actual"].to_numpy(dtype=float), color="black", marker="o", ms=3, label="demand (req/s)")
        tw.set_ylabel("demand (req/s, provisioned)", fontsize=8)
        tw.set_ylim(0, float(np.nanmax(d["actual"].to_numpy(dtype=float))) * 1.35 + 1e-9)
        h2, l2 = tw.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    a1.set_ylim(0, float(e["energy_j"].max()) / J_PER_KWH * 1.35 + 1e-12)
    a1.legend(handles, labels, fontsize=7, loc="upper left", ncol=2)
    a1.set_title("Energy and demand per epoch", fontsize=9)
    _clock_axis(a1, len(e), epoch_s)
    a2.bar(pos, e["cost_usd"].to_numpy(dtype=float) / (epoch_s / 3600.0), color="#dd8452", label="money (USD/h)")
    a2.set_ylabel("money (USD/h)", fontsize=8)
    a2.set_ylim(0, float(e["cost_usd"].max()) / (epoch_s / 3600.0) * 1.25 + 1e-12)
    a2.legend(fontsize=7, loc="upper left")
    a2.set_title("Money per epoch, as an hourly rate", fontsize=9)
    _clock_axis(a2, len(e), epoch_s)
    fig.tight_layout()
    return to_png(fig)


def _log_axes(ax) -> None:
    """Both axes logarithmic, ticked and labelled at decades, or at 1-2-5 steps when the data span
    less than two decades (called after plotting, so that the limits are the data's). No minor
    ticks: their labels overlap on narrow panels, and laying them out is most of a log panel's
    drawing time."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        axis.set_minor_locator(NullLocator())
        if lo > 0 and hi > lo and math.log10(hi / lo) < 2.0:
            axis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))


def pareto_candidates(table: pd.DataFrame, chosen: set[str], phase: str = "colocated", max_buckets: int = 6) -> bytes:
    """Latency vs energy per request of feasible candidates, coloured by generation, per class;
    Pareto-optimal points outlined, the plan's chosen configurations marked with a star."""
    t = table[table["feasible"] & (table["phase"] == phase)]
    buckets = list(dict.fromkeys(t["bucket"]))[:max_buckets]
    n = max(len(buckets), 1)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.3 * cols, 3.5 * rows), squeeze=False)
    for ax, b in zip(axes.flat, buckets, strict=False):
        tb = t[t["bucket"] == b]
        for chip, tc in tb.groupby("chip", sort=True):
            ax.scatter(tc["latency_s"], tc["energy_j_per_req"], s=6, alpha=0.35, color=colour(chip), label=chip)
            pf = tc[tc["pareto_energy"]]
            ax.scatter(pf["latency_s"], pf["energy_j_per_req"], s=18, facecolors="none", edgecolors=colour(chip))
        ch = tb[tb["config_id"].isin(chosen)]
        if not ch.empty:
            ax.scatter(ch["latency_s"], ch["energy_j_per_req"], s=120, marker="*", color="black", label="chosen")
        _log_axes(ax)
        ax.set_title(f"class {b}", fontsize=9)
        ax.set_xlabel("latency (s)", fontsize=8)
        ax.set_ylabel("energy per request (J)", fontsize=8)
        hs = [
            plt.Line2D([], [], color=colour(c), marker="o", linestyle="", markersize=5, label=c)
            for c in sorted(tb["chip"].unique())
        ][: MAX_LEGEND - 1]
        if not ch.empty:
            hs.append(plt.Line2D([], [], color="black", marker="*", linestyle="", markersize=9, label="chosen"))
        ax.legend(handles=hs, fontsize=6, loc="upper right")
    for ax in list(axes.flat)[len(buckets) :]:
        ax.axis("off")
    fig.suptitle(f"Candidates ({phase}): latency vs energy per request; rings = Pareto front", fontsize=10)
    fig.tight_layout()
    return to_png(fig)


MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def rooflines(roofs: list[dict], classes: pd.DataFrame) -> bytes:
    """The three rooflines (FLOP/s, FLOP/J, FLOP/$) of each chip, request classes placed on them by
    arithmetic intensity (``classes``: bucket, chip, intensity); marker = class, colour = the
    generation that serves it."""
    from neuscale_opt.roofline import roofline_curves

    fig, axes = plt.subplots(1, 3, figsize=(13.5, 4.0))
    i = np.logspace(-1, 4, 200)
    titles = [("flop_per_s", "FLOP/s"), ("flop_per_j", "FLOP/J"), ("flop_per_usd", "FLOP/$")]
    names = sorted(set(classes["bucket"])) if classes is not None and not classes.empty else []
    marker = {b: MARKERS[k % len(MARKERS)] for k, b in enumerate(names)}
    for roof in roofs:
        cur = roofline_curves(roof, i)
        for ax, (key, _) in zip(axes, titles, strict=True):
            ax.plot(i, cur[key], color=colour(roof["chip"]), label=roof["chip"])
        if names:
            mine = classes[classes["chip"] == roof["chip"]]
            if not mine.empty:
                pts = roofline_curves(roof, mine["intensity"].to_numpy())
                for ax, (key, _) in zip(axes, titles, strict=True):
                    for x, y, b in zip(mine["intensity"], pts[key], mine["bucket"], strict=True):
                        ax.scatter(
                            [x], [y], color=colour(roof["chip"]), marker=marker[b], s=40, zorder=3, edgecolors="black"
                        )
    for ax, (_, label) in zip(axes, titles, strict=True):
        _log_axes(ax)
        ax.set_xlabel("arithmetic intensity (FLOP per HBM byte)", fontsize=8)
        ax.set_ylabel(label, fontsize=8)
        ax.set_title(f"{label} roofline", fontsize=9)
        gen = ax.legend(fontsize=6, loc="lower right", title="generation", title_fontsize=6)
        if names:
            ax.add_artist(gen)
            hs = [plt.Line2D([], [], color="#555", marker=marker[b], linestyle="", label=b) for b in names]
            ax.legend(
                handles=hs[:MAX_LEGEND], fontsize=6, loc="upper left", title="class (as planned)", title_fontsize=6
            )
    fig.tight_layout()
    return to_png(fig)


def _layer_grid(dims: tuple[int, ...]) -> tuple[int, int, int, int]:
    """A 3-D pod's z-layers tiled as a near-square grid: (rows of layers, columns of layers, x, y)."""
    x, y = dims[0], dims[1]
    layers = 1 if len(dims) == 2 else dims[2]
    cols = math.ceil(math.sqrt(layers * x / max(y, 1)))
    cols = max(1, min(layers, cols))
    return math.ceil(layers / cols), cols, x, y


def _spans(sig: list, epochs: list[int], limit: int) -> list[tuple[int, int]]:
    """Runs of equal signatures as (first epoch, last epoch); at most ``limit`` (evenly thinned)."""
    spans: list[tuple[int, int]] = []
    for k, t in enumerate(epochs):
        if k and sig[k] == sig[k - 1]:
            spans[-1] = (spans[-1][0], t)
        else:
            spans.append((t, t))
    if len(spans) > limit:
        idx = sorted(set(np.linspace(0, len(spans) - 1, limit).round().astype(int)))
        spans = [spans[k] for k in idx]
    return spans


def _pod_spans(placements: pd.DataFrame, pod: str, epochs: list[int], limit: int) -> list[tuple[int, int]]:
    sig = []
    for t in epochs:
        sl = placements[(placements["epoch"] == t) & (placements["pod"] == pod)]
        sig.append(tuple(sorted((str(r.vpod_group), str(r.origin)) for r in sl.itertuples())))
    return _spans(sig, epochs, limit)


def _span_label(span: tuple[int, int], epochs: list[int], epoch_s: float) -> str:
    a, b = epochs.index(span[0]), epochs.index(span[1])
    return clock(a * epoch_s) if a == b else f"{clock(a * epoch_s)}-{clock((b + 1) * epoch_s)}"


def pod_maps(
    pods: list[dict],
    placements: pd.DataFrame | None,
    epochs: list[int],
    epoch_s: float,
    counted: list[str],
    chips_held: pd.DataFrame,
    inventory: dict[str, float],
    main: dict[tuple[int, str], str] | None = None,
    classes: list[str] | None = None,
    max_columns: int = 6,
) -> bytes:
    """Small multiples: one row per placed pod, one column per epoch where its occupancy changes
    (colour = generation, pattern = class, alternate slices shaded; x = failed chip; grey = free),
    and one row per counted generation (no geometry): its healthy chips as a block of squares,
    those held filled. ``main``: (epoch, vPod group) -> its main class (:func:`main_class`); when
    every pod needs one column only, the pods are drawn side by side."""
    main = main or {}

    def klass(t, s) -> str:
        return main.get((int(t), str(getattr(s, "vpod_group", ""))), str(s.bucket).split("+")[0])

    pl = placements if placements is not None else pd.DataFrame(columns=["epoch", "pod", "chips", "bucket"])
    show = {p["pod"]: _pod_spans(pl, p["pod"], epochs, max_columns) for p in pods}
    count_spans = {
        c: _spans([int(chips_held.loc[t, c]) if c in chips_held.columns else 0 for t in epochs], epochs, max_columns)
        for c in counted
    }
    rows_n = len(pods) + len(counted)
    ncol = max([len(v) for v in (*show.values(), *count_spans.values())] + [1])
    if ncol == 1:  # one picture per pod: side by side
        fig, grid = plt.subplots(1, rows_n, figsize=(max(2.6 * rows_n, 7.0), 3.9), squeeze=False)
        axes = [[grid[0][r]] for r in range(rows_n)]
    else:
        fig, grid = plt.subplots(rows_n, ncol, figsize=(max(2.3 * ncol, 7.0), 2.3 * rows_n + 0.8), squeeze=False)
        axes = [list(row) for row in grid]
    drawn = {klass(s.epoch, s) for s in pl.itertuples()} if not pl.empty else set()
    hatch = class_hatches(classes or drawn)
    for r, pod in enumerate(pods):
        dims = tuple(pod["dims"])
        lr, lc, x, y = _layer_grid(dims)
        for k in range(ncol):
            ax = axes[r][k]
            ax.set_xticks([])
            ax.set_yticks([])
            if k >= len(show[pod["pod"]]):
                ax.axis("off")
                continue
            span = show[pod["pod"]][k]
            t = span[0]
            ax.set_xlim(0, lc * (y + 1) - 1)
            ax.set_ylim(lr * (x + 1) - 1, 0)
            ax.set_aspect("equal")

            def cell(c, lc=lc, x=x, y=y):
                z = c[2] if len(c) == 3 else 0
                return (z % lc) * (y + 1) + c[1], (z // lc) * (x + 1) + c[0]

            for z in range(lr * lc if len(dims) == 3 else 1):
                if len(dims) == 3 and z >= dims[2]:
                    break
                ox, oy = (z % lc) * (y + 1), (z // lc) * (x + 1)
                ax.add_patch(Rectangle((ox, oy), y, x, facecolor=UNUSED, edgecolor="none"))
            sl = pl[(pl["epoch"] == t) & (pl["pod"] == pod["pod"])]
            for j, s in enumerate(sl.itertuples()):
                # one collection per slice (its chips share colour, shade and pattern): one artist
                # to draw instead of one per chip
                b = klass(t, s)
                ax.add_collection(
                    PatchCollection(
                        [Rectangle(cell(c), 1, 1) for c in s.chips],
                        facecolor=colour(pod["chip"]),
                        alpha=1.0 if j % 2 == 0 else 0.6,
                        hatch=hatch.get(b, "") or None,
                        edgecolor="white",
                        linewidths=0.3,
                    )
                )
            for f in pod["failed"]:
                cx, cy = cell(f)
                ax.plot([cx + 0.1, cx + 0.9], [cy + 0.1, cy + 0.9], color="black", lw=1)
                ax.plot([cx + 0.9, cx + 0.1], [cy + 0.1, cy + 0.9], color="black", lw=1)
            held = int(sum(len(s.chips) for s in sl.itertuples()))
            ax.set_title(f"{pod['pod']}, {_span_label(span, epochs, epoch_s)}\n{held} chips held", fontsize=7)
    for i, chip in enumerate(counted):
        r = len(pods) + i
        inv = inventory.get(chip, 0.0)
        n = int(inv) if math.isfinite(inv) else int(chips_held[chip].max())
        side = max(1, math.ceil(math.sqrt(n)))
        cols = count_spans[chip]
        for k in range(ncol):
            ax = axes[r][k]
            ax.set_xticks([])
            ax.set_yticks([])
            if k >= len(cols):
                ax.axis("off")
                continue
            span = cols[k]
            t = span[0]
            held = int(chips_held.loc[t, chip]) if chip in chips_held.columns else 0
            ax.set_xlim(0, side)
            ax.set_ylim(side, 0)
            ax.set_aspect("equal")
            for lo, hi, face in ((0, min(held, n), colour(chip)), (min(held, n), n, UNUSED)):
                if hi > lo:  # the held chips, then the free ones: one collection each
                    ax.add_collection(
                        PatchCollection(
                            [Rectangle((q % side, q // side), 1, 1) for q in range(lo, hi)],
                            facecolor=face,
                            edgecolor="white",
                            linewidths=0.3,
                        )
                    )
            ax.set_title(
                f"{chip}, {_span_label(span, epochs, epoch_s)}\ncounted, not placed: {held} of {n}", fontsize=7
            )
    handles = _class_handles({c: h for c, h in hatch.items() if c in drawn}) if drawn else []
    handles = handles[: MAX_LEGEND - 2] + [
        Patch(facecolor=UNUSED, label="free chip"),
        plt.Line2D([], [], color="black", marker="x", linestyle="", label="failed chip"),
    ]
    fig.legend(
        handles=handles, fontsize=7, loc="lower center", ncol=min(len(handles), 8), title="main class", title_fontsize=7
    )
    fig.suptitle("Occupancy over time: placed pods (z-layers tiled) and counted generations", fontsize=10)
    fig.tight_layout(rect=(0, 0.09 if ncol == 1 else 0.07, 1, 0.95))
    return to_png(fig)
