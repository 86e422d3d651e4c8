from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTANCES = ROOT / "instances"


@pytest.fixture
def instances_dir() -> Path:
    return INSTANCES
