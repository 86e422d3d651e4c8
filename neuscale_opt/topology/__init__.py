"""Physical placement of vPods on TPU pods (spec: ``formulations/placement.md``).

* :mod:`~neuscale_opt.topology.pods`: pod graphs and distinct pod states of an instance;
* :mod:`~neuscale_opt.topology.slices`: allowed shapes, aligned placements and their checks;
* :mod:`~neuscale_opt.topology.patterns`: feasible packing patterns per pod state and their realisation;
* :mod:`~neuscale_opt.topology.greedy`: the first-fit placer of the greedy heuristic;
* :mod:`~neuscale_opt.topology.check`: the independent placement check of the evaluator;
* :mod:`~neuscale_opt.topology.milp`: the Pyomo constraint builders (the only module here importing Pyomo).

Rules and their sources: ``hardware.md`` section 2 (copied with citations into the spec).
"""

from __future__ import annotations

from neuscale_opt.topology.pods import PodState, pod_graph, pod_states
from neuscale_opt.topology.slices import Placement, allowed_shapes, check_shape, parse_shape, placements

__all__ = [
    "Placement",
    "PodState",
    "allowed_shapes",
    "check_shape",
    "parse_shape",
    "placements",
    "pod_graph",
    "pod_states",
]
