"""neuscale-opt: capacity planning for LLM serving on heterogeneous accelerator fleets."""

from __future__ import annotations

__version__ = "0.1.0"
