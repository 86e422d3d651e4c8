"""The names of the forecasters a rolling plan may read (the registry is
``neuscale_opt.traces.forecast.METHODS``; the instance schema and the CLI check names against this
tuple without importing numpy or pandas)."""

FORECAST_METHODS: tuple[str, ...] = ("last-peak", "ewma", "seasonal-naive", "quantile", "quantile-growth", "oracle")
