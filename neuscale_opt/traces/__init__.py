"""Traces to per-epoch demand: loaders, request classes, demand, forecasters and backtests.

Modules: ``spec`` (validated inputs), ``loaders``, ``buckets``, ``demand``, ``forecast``, ``synth``,
``shipped`` (paths of the traces in ``instances/data``) and ``cli`` (``trace-stats``, ``forecast``).
The specification is ``formulations/forecast.md``.
"""
