"""``python -m neuscale_opt.cli``: the same as the ``neuscale-opt`` console script."""

from __future__ import annotations

from neuscale_opt.cli import console

console()
