"""The real traces shipped in ``instances/data/`` (source, license and citation in its README.md).

These are the files the default and example instances name; keep the names in step with
``instances/data/README.md``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

DATA_DIR = Path(str(resources.files("neuscale_opt.instances"))) / "data"

AZURE_CONV = DATA_DIR / "azure_llm_2023_conv.csv"  # CC-BY 4.0, Patel et al. (Splitwise), ISCA 2024
AZURE_CODE = DATA_DIR / "azure_llm_2023_code.csv"  # CC-BY 4.0, idem
MOONCAKE_CONV = DATA_DIR / "mooncake_fast25_conversation.csv.gz"  # Apache-2.0, Qin et al., FAST 2025
SERVEGEN = DATA_DIR / "servegen_bailian_rate_10min.csv"  # Apache-2.0, Xiang et al., arXiv:2505.09999

SHIPPED: dict[str, Path] = {
    "azure_conv": AZURE_CONV,
    "azure_code": AZURE_CODE,
    "mooncake_conv": MOONCAKE_CONV,
    "servegen": SERVEGEN,
}
