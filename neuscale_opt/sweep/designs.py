"""Designs: turn a spec's parameters into scenarios (an id and one value per parameter).

* ``grid``: the full factorial of every parameter's levels (its list, or ``num`` points of its range);
* ``oat``: one at a time: the nominal scenario, then each parameter at each of its levels with the
  others at nominal (what a tornado chart needs, in 1 + sum(levels) scenarios);
* ``lhs``: a Latin hypercube of ``samples`` points (``scipy.stats.qmc.LatinHypercube``, seeded);
* ``mc``: ``samples`` independent uniform points (``numpy.random.default_rng(seed)``).

Sampled designs draw u in [0, 1) per parameter and map it through the inverse CDF of the
parameter's distribution on [low, high] (a list: the value at index floor(u * len)). The scenario
``nominal`` (every parameter at its nominal value) is always part of the sweep: regret is measured
against its plan. Ids are ``nominal`` and ``s0001``, ``s0002``, ... in design order, so a spec
always yields the same scenarios.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.stats import qmc

from neuscale_opt.sweep.spec import Parameter, SweepSpec

NOMINAL = "nominal"


@dataclass(frozen=True)
class Scenario:
    """One point of the design: ``values`` maps a parameter's label to its value; ``varied`` names
    the parameter a one-at-a-time scenario moves (empty otherwise)."""

    scenario_id: str
    values: dict[str, float]
    varied: str = ""


def _clean(v: float) -> float:
    """12 significant digits: the same value however it was computed."""
    return float(f"{float(v):.12g}")


def _from_unit(p: Parameter, u: np.ndarray) -> np.ndarray:
    """Inverse CDF of the parameter's distribution at the points ``u`` in [0, 1)."""
    if p.values:
        idx = np.minimum((u * len(p.values)).astype(int), len(p.values) - 1)
        return np.asarray(p.values, dtype=float)[idx]
    lo, hi = float(p.low), float(p.high)
    if p.distribution == "uniform":
        x = lo + u * (hi - lo)
    elif p.distribution == "loguniform":
        x = np.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
    elif p.distribution == "triangular":
        mode = (lo + hi) / 2.0 if p.mode is None else float(p.mode)
        x = stats.triang(c=(mode - lo) / (hi - lo), loc=lo, scale=hi - lo).ppf(u)
    else:  # normal, truncated to [low, high]
        mean = (lo + hi) / 2.0 if p.mode is None else float(p.mode)
        sd = (hi - lo) / 4.0 if p.sd is None else float(p.sd)
        x = stats.truncnorm((lo - mean) / sd, (hi - mean) / sd, loc=mean, scale=sd).ppf(u)
    return np.round(x) if p.integer else x


def scenarios(spec: SweepSpec, nominal: dict[str, float]) -> list[Scenario]:
    """The scenarios of ``spec``; ``nominal`` gives each parameter's nominal value by label."""
    params = spec.parameter
    labels = [p.label for p in params]
    nom = {k: _clean(nominal[k]) for k in labels}
    out = [Scenario(NOMINAL, dict(nom), "")]
    points: list[tuple[dict[str, float], str]] = []
    if spec.design == "grid":
        for combo in itertools.product(*(p.levels() for p in params)):
            points.append(({k: _clean(v) for k, v in zip(labels, combo, strict=True)}, ""))
    elif spec.design == "oat":
        for p in params:
            for v in p.levels():
                if _clean(v) != nom[p.label]:
                    points.append(({**nom, p.label: _clean(v)}, p.label))
    else:
        d = len(params)
        if spec.design == "lhs":
            u = qmc.LatinHypercube(d=d, seed=spec.seed).random(spec.samples)
        else:
            u = np.random.default_rng(spec.seed).random((spec.samples, d))
        cols = [_from_unit(p, u[:, j]) for j, p in enumerate(params)]
        for i in range(spec.samples):
            points.append(({k: _clean(cols[j][i]) for j, k in enumerate(labels)}, ""))
    out.extend(Scenario(f"s{i + 1:04d}", vals, varied) for i, (vals, varied) in enumerate(points))
    return out
