"""Random tiny allocation instances for the brute-force and property tests."""

from __future__ import annotations

import random

from neuscale_opt.alloc.fixtures import make_coefficients, vpod
from neuscale_opt.coefficients import Coefficients


def random_instance(seed: int, n_types: int = 3, n_classes: int = 2, epochs: int = 1) -> Coefficients:
    """Vpod types on two generations with consistent per-vPod data; per-class rates and energies;
    small inventories so that fail-over and shortages happen."""
    rng = random.Random(seed)
    rows = []
    classes = [f"c{i}" for i in range(n_classes)]
    for t in range(n_types):
        chip = rng.choice(["old", "new"])
        chips = rng.choice([1, 2, 4])
        static = rng.choice([50.0, 100.0, 200.0]) * chips
        price = rng.choice([0.5, 1.0, 2.0]) * chips
        emb = rng.choice([0.0, 0.01]) * chips
        for b in classes:
            if rng.random() < 0.2:
                continue  # this type cannot serve this class within its SLO
            rows.append(
                vpod(
                    chip,
                    b,
                    rate=rng.choice([2.0, 3.0, 5.0, 8.0]),
                    dyn_j=rng.choice([0.5, 1.0, 4.0]),
                    static_w=static,
                    price=price,
                    chips=chips,
                    embodied=emb,
                    name=f"t{t}",
                )
            )
    if not rows:
        rows.append(vpod("old", classes[0], rate=5.0, static_w=10.0, price=1.0, name="t0"))
    demand = {(e, b): rng.choice([0.0, 1.5, 4.0, 7.0, 11.0]) for e in range(epochs) for b in classes}
    inventory = {"old": rng.choice([4, 8, 16]), "new": rng.choice([2, 4, 8])}
    return make_coefficients(
        rows,
        demand,
        inventory=inventory,
        epoch_s=100.0,
        pue=1.2,
        carbon_kg_per_kwh=0.4,
        util_cap=rng.choice([0.8, 1.0]),
    )
