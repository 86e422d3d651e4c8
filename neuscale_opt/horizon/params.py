"""Parameters of horizon planning: the auto-scaling rules as numbers, and inventory over time.

:class:`HorizonParams` is the horizon package's own frozen view of the ``[horizon]`` table of an
instance (``neuscale_opt.instance.Horizon``); every default is the NeuScale paper's value (section
3.4) or, for the creation delay, the replay's (``neuscale_opt.replay.ReplayOptions``). Symbols are
those of ``formulations/horizon.md``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from neuscale_opt.errors import InputError
from neuscale_opt.forecast_names import FORECAST_METHODS
from neuscale_opt.instance import inventory_schedule  # noqa: F401 (public as neuscale_opt.horizon.inventory_schedule)
from neuscale_opt.traces.demand import prewarm_lead_s

#: Tolerance of the linearised floor in the scale-down limit (see ``shrink_limit``).
FLOOR_EPS = 1e-3


@dataclass(frozen=True)
class HorizonParams:
    """The constants of the multi-epoch model and of the reactive policies.

    Attributes (symbol of ``formulations/horizon.md``, default and source)
    ----------------------------------------------------------------------
    window:
        H, epochs planned at each step of the rolling plan; ``None`` = the default of the caller
        (``plan_horizon``: 3 epochs, see ``formulations/horizon.md``, "Window length"; ``plan_rolling``:
        every epoch).
    forecast:
        forecaster of the rolling plan (``traces.forecast``); default ``last-peak``, the paper's rule.
    coupling:
        False drops every coupling constraint (then the plan is the per-epoch MILP on the forecast).
    growth_max:
        gamma = 2.0: a group's vPod count at most doubles per epoch (paper section 3.4).
    new_group_vpods:
        a = 1: vPods a group may add beyond doubling, so that an empty group can start
        (0 -> 1 -> 3 -> 7 ...).
    shrink_factor:
        sigma = 0.5: a group keeps at least floor(sigma n) of its n vPods per epoch (halving).
    shrink_after_s:
        30 min: a group keeps as many vPods as its load needed in any epoch of the last
        K = shrink_after_s / T epochs (scale down only after 30 minutes below need).
    monitor_window_s:
        30 min: the reactive policies size a group for the peak rate of the last W = 30 min.
    coalesce_threshold:
        theta = 0.5: a class whose own group would be used below theta joins a group of the same vPod
        type that has room (reactive policies).
    create_delay_s:
        30 s: a created vPod serves only after this delay (weights loading); its share
        delta = create_delay_s / T of the epoch is lost capacity. Same default as the replay.
    create_energy_j_per_chip, delete_energy_j_per_chip:
        extra energy (J per chip, before PUE) of creating / deleting a vPod, beyond its static power
        while held (which the held term already charges); default 0.
    reserve_forecast:
        None (default) or a second forecaster (``last-peak``, ``quantile``, ...): the rolling plan then
        keeps, beside the vPods it plans for ``forecast``, room in the fleet for the demand this
        forecaster gives (reserve vPods of the groups it holds, up to (gamma - 1) n each, inside the
        inventory; ``formulations/horizon.md``, "Guard reserve"): room the replay's surge guard can
        grow into when the demand comes in above the plan's forecast. Kept unless keeping it would
        leave demand the plan forecasts unserved.
    prewarm:
        True (default): the plan of epoch t >= 1 is made ``create_delay_s`` before the epoch starts,
        from the trace observed until then, and the vPods it adds are created then, ready when the
        epoch starts: no capacity is lost (delta = 0) and each created vPod is held (paid, static
        power) ``create_delay_s`` longer (:meth:`lead_s`; the replay's ``ReplayOptions.prewarm``).
        Only when ``0 < create_delay_s < T``; False: created at the boundary, delta lost.
    """

    window: int | None = None
    forecast: str = "last-peak"
    coupling: bool = True
    growth_max: float = 2.0
    new_group_vpods: int = 1
    shrink_factor: float = 0.5
    shrink_after_s: float = 1800.0
    monitor_window_s: float = 1800.0
    coalesce_threshold: float = 0.5
    create_delay_s: float = 30.0
    create_energy_j_per_chip: float = 0.0
    delete_energy_j_per_chip: float = 0.0
    prewarm: bool = True
    reserve_forecast: str | None = None

    def __post_init__(self) -> None:
        problems: list[str] = []
        if self.window is not None and (int(self.window) != self.window or self.window < 1):
            problems.append(f"window must be a positive integer, got {self.window}")
        if self.forecast not in FORECAST_METHODS:
            problems.append(f"forecast must be one of {list(FORECAST_METHODS)}, got {self.forecast!r}")
        if self.reserve_forecast is not None and self.reserve_forecast not in FORECAST_METHODS:
            problems.append(
                f"reserve_forecast must be one of {list(FORECAST_METHODS)} or absent, got {self.reserve_forecast!r}"
            )
        if not self.growth_max >= 1:
            problems.append(f"growth_max must be >= 1, got {self.growth_max}")
        if self.new_group_vpods < 0:
            problems.append(f"new_group_vpods must be >= 0, got {self.new_group_vpods}")
        if not 0 <= self.shrink_factor <= 1:
            problems.append(f"shrink_factor must be in [0, 1], got {self.shrink_factor}")
        if not self.shrink_after_s >= 0:
            problems.append(f"shrink_after_s must be >= 0, got {self.shrink_after_s}")
        if not self.monitor_window_s > 0:
            problems.append(f"monitor_window_s must be > 0, got {self.monitor_window_s}")
        if not 0 <= self.coalesce_threshold <= 1:
            problems.append(f"coalesce_threshold must be in [0, 1], got {self.coalesce_threshold}")
        for name in ("create_delay_s", "create_energy_j_per_chip", "delete_energy_j_per_chip"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                problems.append(f"{name} must be a finite number >= 0, got {v}")
        if problems:
            raise InputError("; ".join(problems), where="horizon")

    def replace(self, **changes: Any) -> HorizonParams:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def hold_epochs(self, epoch_s: float) -> int:
        """K = ceil(shrink_after_s / T): epochs of load a group must cover before it shrinks."""
        return math.ceil(self.shrink_after_s / epoch_s - 1e-9)

    def monitor_epochs(self, epoch_s: float) -> int:
        """W = ceil(monitor_window_s / T): epochs the reactive rule takes its peak over."""
        return max(1, math.ceil(self.monitor_window_s / epoch_s - 1e-9))

    def lead_s(self, epoch_s: float) -> float:
        """L: how long before an epoch starts its plan is made and its new vPods are created
        (``create_delay_s`` with ``prewarm`` and ``0 < create_delay_s < T``, else 0). The same
        without ``coupling``: the replay pre-warms those plans' new vPods as well, so they are made
        from the same history, and the schedule evaluator charges the hold."""
        return prewarm_lead_s(self.create_delay_s, self.prewarm, epoch_s)

    def delay_share(self, epoch_s: float) -> float:
        """delta = min(create_delay_s / T, 1): share of an epoch a created vPod does not serve
        (0 when it is pre-warmed, :meth:`lead_s` > 0)."""
        if self.lead_s(epoch_s) > 0:
            return 0.0
        return min(self.create_delay_s / epoch_s, 1.0)

    @classmethod
    def from_instance(cls, instance: Any, **overrides: Any) -> HorizonParams:
        """Read the ``[horizon]`` table (absent: the defaults); non-None ``overrides`` win."""
        h = getattr(instance, "horizon", None)
        values: dict[str, Any] = {}
        if h is not None:
            values = {k: getattr(h, k) for k in cls.__dataclass_fields__ if hasattr(h, k)}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
