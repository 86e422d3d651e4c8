"""Shared builders of the topology tests."""

from __future__ import annotations

import random

from neuscale_opt.instance import parse_instance
from neuscale_opt.topology.pods import PodState, StateGroup, state_of


def instance_dict(fleet: list[dict]) -> dict:
    """A minimal valid instance with the given fleet entries."""
    return {
        "name": "placement-test",
        "model": {"name": "Llama-3-8B"},
        "fleet": fleet,
        "workload": {
            "classes": [{"name": "short", "input_tokens": 512, "output_tokens": 128}],
            "demand": [{"epoch": 0, "bucket": "short", "rate_rps": 10.0}],
        },
    }


def instance(fleet: list[dict]):
    return parse_instance(instance_dict(fleet))


def random_state(rng: random.Random, chip: str, dims: tuple[int, ...], max_failed: int) -> PodState:
    n = rng.randint(0, max_failed)
    failed = {tuple(rng.randrange(d) for d in dims) for _ in range(n)}
    return state_of(chip, dims, failed)


def groups_of(*states: PodState) -> list[StateGroup]:
    """One group per distinct state, pods numbered in order."""
    out: dict[PodState, list[str]] = {}
    for i, s in enumerate(states):
        out.setdefault(s, []).append(f"{s.chip}/{i}")
    return [StateGroup(s, len(ids), tuple(ids)) for s, ids in out.items()]
