"""The registry of CLI subcommand groups.

Each entry is a ``register(subparsers)`` function from the module that owns the commands. Adding a
command group means adding its ``register`` here; ``neuscale_opt.cli`` never changes.
"""

from __future__ import annotations

from neuscale_opt import commands_core
from neuscale_opt.alloc import cli as alloc_cli
from neuscale_opt.replay import cli as replay_cli
from neuscale_opt.report import bench as report_bench
from neuscale_opt.sweep import cli as sweep_cli
from neuscale_opt.traces import cli as traces_cli

REGISTRARS = [
    commands_core.register,
    traces_cli.register,
    alloc_cli.register,
    replay_cli.register,
    report_bench.register,
    sweep_cli.register,
]
