"""Subcommands ``trace-stats`` and ``forecast``.

``neuscale-opt trace-stats TRACE [--json [PATH]]``
    Rows, span, rates, token quantiles, requests per epoch and the bucket histogram with the
    representative lengths of each bucket. For a rate series: windows, span, rate quantiles and
    the windows filled from gaps.

``neuscale-opt forecast TRACE --method M [--epoch S] [--json PATH|-] [--csv PATH] [--backtest]``
    Per-epoch demand, the forecast (``--steps`` future epochs) and, with ``--backtest``, per-bucket
    MAE, MAPE and under-forecast rate. A rate-series TRACE gives one class ``all`` at the series'
    window; with ``--synthetic-tokens TRACE2`` it is instead composed with TRACE2's token mix
    (seeded, labelled synthetic, :mod:`neuscale_opt.traces.synth`).

Both read TRACE in any supported format (auto-detected from the header). Errors are
:class:`~neuscale_opt.errors.InputError` (exit 2, one line naming file, row and column); every
output is computed before anything is written, and files are written atomically.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuscale_opt.cli import Command
from neuscale_opt.errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from neuscale_opt.traces.spec import BucketSpec, ColumnMap

FORMATS = ("auto", "azure", "mooncake", "burstgpt", "generic", "rate-series")
STAT_QUANTILES = (0.5, 0.9, 0.99)
STATS_COLUMNS = ["bucket", "count", "share", "mean_input", "mean_output", "input_tokens", "output_tokens"]


# ----------------------------------------------------------------------------------------------
# shared options
# ----------------------------------------------------------------------------------------------
def _edges(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"edges must be comma-separated integers, got {text!r}") from None


def _add_trace_options(p: argparse.ArgumentParser) -> None:
    from neuscale_opt.traces.buckets import DEFAULT_INPUT_EDGES, DEFAULT_OUTPUT_EDGES, DEFAULT_TOTAL_EDGES
    from neuscale_opt.traces.demand import DEFAULT_EPOCH_S, DEFAULT_SUBWINDOW_S

    p.add_argument("trace", metavar="TRACE", help="trace file (CSV, CSV.gz or JSONL; format from its header)")
    p.add_argument("--format", choices=FORMATS, default="auto", help="trace format (default: auto)")
    p.add_argument(
        "--columns",
        metavar="ARRIVAL,INPUT,OUTPUT",
        help="column names of a generic CSV (with --format generic)",
    )
    p.add_argument("--time-unit", choices=("s", "ms", "datetime"), default="s", help="generic arrival unit")
    p.add_argument("--series", help="series of a rate-series file (ServeGen: the model, e.g. m-large)")
    p.add_argument("--start", type=float, default=0.0, metavar="S", help="horizon start, s after first arrival")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="horizon length in s")
    p.add_argument(
        "--spread",
        type=float,
        default=0.0,
        metavar="S",
        help="the timestamps' resolution: move each arrival to a uniform point of [t, t + S) (default 0: as recorded)",
    )
    p.add_argument(
        "--buckets",
        choices=("total", "input_output", "none"),
        default="total",
        help="request classes: 1-D total length (default), 2-D input x output, or one class 'all'",
    )
    p.add_argument(
        "--edges", type=_edges, help=f"total-length edges (default {','.join(map(str, DEFAULT_TOTAL_EDGES))})"
    )
    p.add_argument(
        "--input-edges", type=_edges, help=f"input edges (default {','.join(map(str, DEFAULT_INPUT_EDGES))})"
    )
    p.add_argument(
        "--output-edges",
        type=_edges,
        help=f"output edges (default {','.join(map(str, DEFAULT_OUTPUT_EDGES))})",
    )
    p.add_argument(
        "--representative",
        choices=("mean", "upper", "p50", "p90", "p99"),
        default="mean",
        help="representative length of a bucket (default: mean)",
    )
    p.add_argument("--epoch", type=float, default=DEFAULT_EPOCH_S, metavar="S", help="epoch length, s (default 300)")
    p.add_argument(
        "--subwindow",
        type=float,
        default=DEFAULT_SUBWINDOW_S,
        metavar="S",
        help="peak sub-window, s (default 10)",
    )


def _bucket_spec(args: argparse.Namespace) -> BucketSpec | None:
    from pydantic import ValidationError

    from neuscale_opt.traces.buckets import DEFAULT_INPUT_EDGES, DEFAULT_OUTPUT_EDGES, DEFAULT_TOTAL_EDGES
    from neuscale_opt.traces.spec import BucketSpec

    if args.buckets == "none":
        return None
    try:
        if args.buckets == "total":
            return BucketSpec(kind="total", edges=args.edges or DEFAULT_TOTAL_EDGES, representative=args.representative)
        return BucketSpec(
            kind="input_output",
            input_edges=args.input_edges or DEFAULT_INPUT_EDGES,
            output_edges=args.output_edges or DEFAULT_OUTPUT_EDGES,
            representative=args.representative,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(str(err.get("msg", exc)).replace("Value error, ", ""), where="--edges") from None


def _column_map(args: argparse.Namespace) -> ColumnMap | None:
    from neuscale_opt.traces.spec import ColumnMap

    if args.columns is None:
        return None
    names = [c.strip() for c in args.columns.split(",")]
    if len(names) != 3 or not all(names):
        raise InputError("give three column names: ARRIVAL,INPUT,OUTPUT", where="--columns")
    return ColumnMap(arrival=names[0], input_tokens=names[1], output_tokens=names[2], time_unit=args.time_unit)


def _format_of(args: argparse.Namespace) -> str:
    from neuscale_opt.traces.loaders import detect_format

    if args.format != "auto":
        return args.format
    if args.columns is not None:
        return "generic"
    return detect_format(Path(args.trace))


def _load(args: argparse.Namespace) -> tuple[str, pd.DataFrame, list[str]]:
    """(format, table, warnings) for TRACE: a per-request trace or a rate series."""
    import warnings

    from neuscale_opt.traces.loaders import TraceWarning, load_rate_series, load_trace_file, spread_arrivals

    fmt = _format_of(args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceWarning)
        if fmt == "rate-series":
            table = load_rate_series(Path(args.trace), series=args.series)
            keep = table["window_start_s"] >= args.start
            if args.duration is not None:
                keep &= table["window_start_s"] < args.start + args.duration
            attrs = dict(table.attrs)
            table = table.loc[keep].reset_index(drop=True)
            table["window_start_s"] -= args.start
            table.attrs.update(attrs)
            if table.empty:
                raise InputError("no window inside --start/--duration", where=args.trace)
        else:
            table = load_trace_file(
                Path(args.trace),
                format=fmt,
                columns=_column_map(args),
                start_s=args.start,
                duration_s=args.duration,
            )
            if table.empty:
                raise InputError("no request inside --start/--duration", where=args.trace)
            if args.spread != 0:
                table = spread_arrivals(table, args.spread, cut=args.duration is not None, where="--spread")
    notes = [str(w.message) for w in caught if issubclass(w.category, TraceWarning)]
    return fmt, table, notes


def _warn(notes: list[str]) -> None:
    import warnings

    from neuscale_opt.traces.loaders import TraceWarning

    for n in notes:
        warnings.warn(n, TraceWarning, stacklevel=2)


def _q(values: np.ndarray) -> dict[str, float]:
    import numpy as np

    qs = np.quantile(values, STAT_QUANTILES) if values.size else [np.nan] * len(STAT_QUANTILES)
    out = {"mean": float(values.mean()) if values.size else np.nan}
    out |= {f"p{round(q * 100)}": float(v) for q, v in zip(STAT_QUANTILES, qs, strict=True)}
    out["max"] = float(values.max()) if values.size else np.nan
    out["min"] = float(values.min()) if values.size else np.nan
    return out


# ----------------------------------------------------------------------------------------------
# trace-stats
# ----------------------------------------------------------------------------------------------
def trace_stats(args: argparse.Namespace) -> dict[str, Any]:
    """The statistics ``trace-stats`` prints, as a JSON-ready dict."""
    import numpy as np

    from neuscale_opt.traces.buckets import bucket_table
    from neuscale_opt.traces.demand import epoch_demand

    fmt, table, notes = _load(args)
    _warn(notes)
    if fmt == "rate-series":
        rate = table["rate_rps"].to_numpy()
        return {
            "source": args.trace,
            "format": fmt,
            "series": table.attrs.get("series"),
            "windows": int(len(table)),
            "window_s": float(table.attrs["window_s"]),
            "span_s": float(len(table) * table.attrs["window_s"]),
            "filled_windows": int(table["filled"].sum()),
            "rate_rps": _q(rate),
            "repaired": notes,
        }
    spec = _bucket_spec(args)
    n = len(table)
    span = float(table["arrival_s"].iloc[-1] - table["arrival_s"].iloc[0])
    inp = table["input_tokens"].to_numpy()
    out = table["output_tokens"].to_numpy()
    demand = epoch_demand(table, None, epoch_s=args.epoch, subwindow_s=args.subwindow)
    full = demand.loc[demand["duration_s"] >= args.epoch * (1 - 1e-9), "count"].to_numpy()
    result: dict[str, Any] = {
        "source": args.trace,
        "format": fmt,
        "rows": n,
        "span_s": span,
        "rate_rps": n / span if span > 0 else None,
        "input_tokens": _q(inp),
        "output_tokens": _q(out),
        "input_token_rate": float(inp.sum() / span) if span > 0 else None,
        "output_token_rate": float(out.sum() / span) if span > 0 else None,
        "epoch_s": args.epoch,
        "full_epochs": int(full.size),
        "requests_per_full_epoch": _q(full.astype(np.float64)),
        "peak_rps": float(demand["peak_rps"].max()),
        "subwindow_s": args.subwindow,
        "shared_instants": shared_instants(table["arrival_s"].to_numpy()),
        "repaired": notes,
    }
    if spec is not None:
        bt = bucket_table(table, spec)
        result["buckets"] = {
            "kind": spec.kind,
            "edges": list(spec.edges) if spec.kind == "total" else None,
            "input_edges": list(spec.input_edges) if spec.kind == "input_output" else None,
            "output_edges": list(spec.output_edges) if spec.kind == "input_output" else None,
            "representative": spec.representative,
            "table": bt.drop(columns=["representative"]).to_dict(orient="records"),
        }
    return result


def shared_instants(arrival_s: Any) -> dict[str, float]:
    """How the arrivals share instants (what the safe loads read as clumps, D13): the distinct
    arrival times, the share of requests that arrive together with another, and the mean and
    largest number of requests at one instant."""
    import numpy as np

    _, counts = np.unique(np.asarray(arrival_s, dtype=float), return_counts=True)
    n = int(counts.sum())
    return {
        "instants": int(len(counts)),
        "share_together": float(counts[counts > 1].sum() / n) if n else 0.0,
        "mean_per_instant": float(n / len(counts)) if len(counts) else 0.0,
        "largest": int(counts.max()) if len(counts) else 0,
    }


def _num(v: float | None, fmt: str) -> str:
    return "n/a" if v is None or v != v else format(v, fmt)


def _stats_text(s: dict[str, Any]) -> str:
    import pandas as pd

    lines = [f"trace          {s['source']} ({s['format']})"]
    if s["format"] == "rate-series":
        r = s["rate_rps"]
        lines += [
            f"series         {s['series']}",
            f"windows        {s['windows']} x {s['window_s']:g} s  (span {s['span_s']:g} s)",
            f"filled         {s['filled_windows']} windows (missing or zero in the source; interpolated)",
            f"rate req/s     mean {r['mean']:.2f}  p50 {r['p50']:.2f}  p90 {r['p90']:.2f}  p99 {r['p99']:.2f}"
            f"  min {r['min']:.2f}  max {r['max']:.2f}",
        ]
    else:
        lines += [
            f"rows           {s['rows']}",
            f"span           {s['span_s']:.1f} s   rate {_num(s['rate_rps'], '.3f')} req/s"
            f"   peak {s['peak_rps']:.1f} req/s ({s['subwindow_s']:g}-s sub-windows)",
        ]
        for key in ("input_tokens", "output_tokens"):
            q = s[key]
            lines.append(
                f"{key:<15}mean {q['mean']:.1f}  p50 {q['p50']:g}  p90 {q['p90']:g}  p99 {q['p99']:g}"
                f"  min {q['min']:g}  max {q['max']:g}"
            )
        sh = s["shared_instants"]
        if sh["share_together"] > 0:
            lines.append(
                f"instants       {sh['instants']} distinct arrival times; {sh['share_together']:.1%} of the requests "
                f"arrive with another (mean {sh['mean_per_instant']:.2f}, largest {sh['largest']}): the safe loads "
                "take them as clumps (AT5); --spread S, workload.trace.spread_s if the timestamps are coarse"
            )
        e = s["requests_per_full_epoch"]
        lines.append(
            f"per {s['epoch_s']:g}-s epoch  {s['full_epochs']} full epochs, requests min {e['min']:g}"
            f"  mean {e['mean']:.1f}  max {e['max']:g}"
        )
        if "buckets" in s:
            b = s["buckets"]
            lines.append(f"buckets        {b['kind']}, representative = {b['representative']}")
            tbl = pd.DataFrame(b["table"])[STATS_COLUMNS]
            lines.append(tbl.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    lines += [f"repaired: {n}" for n in s["repaired"]]
    return "\n".join(lines) + "\n"


def _cmd_trace_stats(args: argparse.Namespace) -> int:
    from neuscale_opt.io import check_output, emit, to_json

    check_output(args.json, "--json")
    stats = trace_stats(args)
    text = to_json(stats) if args.json is not None else _stats_text(stats)
    emit(text, args.json if args.json is not None else "-", "--json")
    return 0


# ----------------------------------------------------------------------------------------------
# forecast
# ----------------------------------------------------------------------------------------------
def _method_params(args: argparse.Namespace) -> dict[str, float]:
    given = {"window_s": args.window, "alpha": args.alpha, "period_s": args.period, "q": args.q}
    return {k: v for k, v in given.items() if v is not None}


def build_demand(args: argparse.Namespace) -> pd.DataFrame:
    """The demand table the ``forecast`` command works on."""
    from neuscale_opt.traces.demand import epoch_demand, series_demand
    from neuscale_opt.traces.loaders import load_trace_file
    from neuscale_opt.traces.synth import compose_demand

    fmt, table, notes = _load(args)
    _warn(notes)
    spec = _bucket_spec(args)
    if fmt == "rate-series":
        if args.synthetic_tokens is None:
            epoch = args.epoch if args.epoch_given else None
            return series_demand(table, epoch_s=epoch)
        tokens = load_trace_file(Path(args.synthetic_tokens))
        return compose_demand(
            table,
            tokens,
            spec,
            seed=args.seed,
            mean_rps=args.mean_rps,
            days=args.days,
            epoch_s=args.epoch,
            subwindow_s=args.subwindow,
        )
    if args.synthetic_tokens is not None:
        raise InputError("--synthetic-tokens needs a rate-series TRACE", where=args.trace)
    return epoch_demand(table, spec, epoch_s=args.epoch, subwindow_s=args.subwindow)


def _cmd_forecast(args: argparse.Namespace) -> int:
    from neuscale_opt.io import Outputs, check_output, frame_to_csv_text, to_json
    from neuscale_opt.traces.demand import DEFAULT_EPOCH_S
    from neuscale_opt.traces.forecast import backtest, forecast

    check_output(args.json, "--json")
    check_output(args.csv, "--csv")

    args.epoch_given = args.epoch is not None
    if args.epoch is None:
        args.epoch = DEFAULT_EPOCH_S
    demand = build_demand(args)
    params = _method_params(args)
    fc = forecast(demand, args.method, steps=args.steps, target=args.target, **params)
    bt = (
        backtest(demand, args.method, target=args.target, score_from=args.score_from, **params)
        if args.backtest
        else None
    )
    if "provenance" in demand.columns:
        fc["provenance"] = demand["provenance"].iloc[0]
    meta = {
        "source": str(fc.attrs.get("source") or args.trace),
        "method": args.method,
        "method_id": fc.attrs["method_id"],
        "params": fc.attrs["params"],
        "target": args.target,
        "epoch_s": fc.attrs["epoch_s"],
        "synthetic": bool(demand.attrs.get("synthetic", False)),
    }
    if demand.attrs.get("synthetic"):
        meta["label"] = demand.attrs["label"]
        meta["seed"] = demand.attrs["seed"]
    # compute every output first, then write them together (nothing partial on a failure)
    outputs: list[tuple[str, str, str]] = []
    if args.json is not None:
        doc: dict[str, Any] = dict(meta)
        doc["forecast"] = fc.drop(columns=["provenance"], errors="ignore").to_dict(orient="records")
        if bt is not None:
            doc["backtest"] = bt.to_dict(orient="records")
            doc["scored_epochs"] = bt.attrs["scored_epochs"]
        outputs.append((to_json(doc), args.json, "--json"))
    if args.csv is not None:
        outputs.append((frame_to_csv_text(fc), args.csv, "--csv"))
    if bt is not None and args.json != "-":
        head = f"# {meta['method']} ({meta['method_id']}) on {meta['source']}, target {args.target}"
        if meta["synthetic"]:
            head += "  [SYNTHETIC]"
        txt = head + "\n" + bt.to_string(index=False, float_format=lambda v: f"{v:.3f}") + "\n"
        outputs.append((txt, "-", "stdout"))
    if not outputs:
        outputs.append((frame_to_csv_text(fc), "-", "stdout"))
    with Outputs() as out:
        for text, dest, flag in outputs:
            out.add(text, dest, flag)
    return 0


def _trace_stats_args(p: argparse.ArgumentParser) -> None:
    _add_trace_options(p)
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH", help="JSON to PATH or stdout (-)")
    p.set_defaults(func=_cmd_trace_stats)


def _forecast_args(f: argparse.ArgumentParser) -> None:
    from neuscale_opt.traces.forecast import METHODS

    _add_trace_options(f)
    f.set_defaults(epoch=None)
    f.add_argument("--method", required=True, choices=list(METHODS), help="forecaster")
    f.add_argument("--steps", type=int, default=1, help="future epochs to forecast (default 1)")
    f.add_argument("--target", choices=("peak_rps", "mean_rps"), default="peak_rps", help="series to forecast")
    f.add_argument("--window", type=float, metavar="S", help="last-peak / quantile window, s (default 1800)")
    f.add_argument("--alpha", type=float, help="ewma smoothing factor (default 2/7)")
    f.add_argument("--period", type=float, metavar="S", help="seasonal-naive period, s (default 86400)")
    f.add_argument("--q", type=float, help="quantile level (default 0.9)")
    f.add_argument("--backtest", action="store_true", help="score one-step forecasts against the actual")
    f.add_argument("--score-from", type=int, default=None, metavar="EPOCH", help="score epochs >= EPOCH only")
    f.add_argument("--json", default=None, metavar="PATH", help="JSON (meta, forecast, backtest) to PATH or -")
    f.add_argument("--csv", default=None, metavar="PATH", help="forecast table as CSV to PATH or -")
    f.add_argument(
        "--synthetic-tokens",
        metavar="TRACE2",
        help="with a rate-series TRACE: compose a synthetic multi-day demand with TRACE2's token mix",
    )
    f.add_argument("--seed", type=int, default=0, help="seed of the synthetic composition (default 0)")
    f.add_argument("--days", type=float, default=None, help="days of the rate series to use (default all)")
    f.add_argument("--mean-rps", type=float, default=None, help="mean rate of the composition (default TRACE2's)")
    f.set_defaults(func=_cmd_forecast)


COMMANDS: dict[str, Command] = {
    "trace-stats": Command(
        "rows, span, rates, token quantiles and bucket histogram of a trace",
        _trace_stats_args,
        description="Summarise a request trace (or rate series): the trace-to-workload-distribution tool.",
    ),
    "forecast": Command(
        "per-epoch demand, a forecast of it, and a backtest",
        _forecast_args,
        description="Turn a trace into per-epoch, per-bucket demand and forecast the rate to provision.",
    ),
}
