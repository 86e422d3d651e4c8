"""Traces to per-epoch demand: loaders, request classes, demand, forecasters and backtests.

Modules: ``spec`` (validated inputs), ``loaders``, ``buckets``, ``demand``, ``forecast``, ``synth``,
and ``shipped`` (paths of the traces in ``instances/data``); the commands ``trace-stats`` and
``forecast`` live in :mod:`neuscale_opt.cli.traces`.
The specification is ``formulations/forecast.md``.
"""
