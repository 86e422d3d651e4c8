"""Scenario sweeps, sensitivity and robust plans (``neuscale-opt sweep``).

``spec`` (the validated TOML sweep file) -> ``designs`` (scenarios) -> ``apply`` (one new instance
per scenario) -> ``run`` (one task and one row per scenario, on a process pool or a Dask cluster,
resumable) -> ``robust`` (the scenario-based MILP) -> ``analysis`` (tornado, decision stability,
regret, robust plans) -> ``report`` (written into the sweep's output folder).
"""
