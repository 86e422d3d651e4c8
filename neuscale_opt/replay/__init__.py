"""Trace replay: the independent judge of a plan.

A discrete-event replay of a request trace against a plan (the allocation planner's JSON): every
request arrives, joins a vPod of its class's group(s), is prefilled and decoded with continuous
batching at roofline step times, and is checked against its class's SLO; vPods are held (paid,
powered) from creation to the end of their drain. Modules: ``plan`` (read and check a plan),
``tables`` (roofline step tables), ``engine`` (the event loop), ``simulate`` (the :func:`replay`
door and the accounting) and ``fixtures`` (a simple plan for tests); the command
``neuscale-opt replay`` lives in :mod:`neuscale_opt.cli.replay`. The model is documented in
``neuscale_opt/replay/README.md``.
"""

from __future__ import annotations

from neuscale_opt.replay.fixtures import simple_plan
from neuscale_opt.replay.plan import Plan, VpodType, load_plan
from neuscale_opt.replay.simulate import ReplayOptions, ReplayResult, replay
from neuscale_opt.replay.tables import StepTable, build_table

__all__ = [
    "Plan",
    "ReplayOptions",
    "ReplayResult",
    "StepTable",
    "VpodType",
    "build_table",
    "load_plan",
    "replay",
    "simple_plan",
]
