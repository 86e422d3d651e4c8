"""Apply a scenario's values, addressed by dotted paths, to an instance: a NEW validated instance.

Paths
-----
* any field of the instance file: ``slo.multiplier``, ``workload.rate_scale``, ``energy.pue``,
  ``model.moe_imbalance``, ``planning.util_cap``, ...;
* a fleet entry by chip name (or index): ``fleet[tpu-v5e].chips`` (alias ``inventory``),
  ``fleet[tpu-v6e].price_usd_per_chip_hour``, ``fleet[tpu-v4].eff_compute`` (derating);
* the catalogs, carried into the instance's own override fields (the catalogs themselves are
  shared package data and never change):
  ``catalog.energy_profiles[PROFILE][CHIP].tflop_per_j`` / ``.hbm_gb_per_j`` ->
  ``energy.chip_overrides``; ``catalog.models[MODEL].moe_imbalance`` -> ``model.moe_imbalance``;
  ``catalog.chips[CHIP].<price_usd_per_chip_hour|embodied_kgco2_per_chip|eff_compute|eff_hbm|
  eff_ici>`` -> that fleet entry's override.

The result is validated by the instance schema itself (:func:`neuscale_opt.instance.parse_instance`),
so a value the instance file would reject is rejected here with the same message. The input
instance is never modified.
"""

from __future__ import annotations

import re
from typing import Any

from neuscale_opt.catalog import energy_spec, get_chip, get_model
from neuscale_opt.errors import InputError
from neuscale_opt.instance import Instance, parse_instance

_TOKEN = re.compile(r"\.?([A-Za-z_]\w*)|\[([^\]]+)\]")
ENERGY_FIELDS = ("tflop_per_j", "hbm_gb_per_j")
CHIP_FIELDS = ("price_usd_per_chip_hour", "embodied_kgco2_per_chip", "eff_compute", "eff_hbm", "eff_ici")


def tokens(path: str) -> list[str]:
    """``fleet[tpu-v5e].chips`` -> ``["fleet", "tpu-v5e", "chips"]`` (InputError if malformed)."""
    out: list[str] = []
    pos = 0
    for m in _TOKEN.finditer(path):
        if m.start() != pos:
            break
        out.append(m.group(1) if m.group(1) is not None else m.group(2).strip())
        pos = m.end()
    if pos != len(path) or not out or path.startswith("."):
        raise InputError("malformed path (use a.b.c, fleet[chip].field)", where=path)
    return out


def _fleet_index(inst: Instance, key: str, path: str) -> int:
    names = inst.chip_names
    if key.isdigit() and int(key) < len(names):
        return int(key)
    if key in names:
        return names.index(key)
    raise InputError(f"no fleet entry {key!r}; the fleet has {', '.join(names)}", where=path)


def _resolve(inst: Instance, path: str) -> tuple[str, list[Any]]:
    """(kind, arguments) of a path: ``energy`` [chip, field], ``fleet`` [index, field] or
    ``field`` [the dump path]."""
    t = tokens(path)
    if t[0] == "catalog":
        if len(t) == 5 and t[1] == "energy_profiles" and t[4] in ENERGY_FIELDS:
            if t[2] != inst.energy.profile:
                raise InputError(f"the instance uses energy profile {inst.energy.profile!r}, not {t[2]!r}", where=path)
            return "energy", [inst.chip_names[_fleet_index(inst, t[3], path)], t[4]]
        if len(t) == 4 and t[1] == "models" and t[3] == "moe_imbalance":
            if t[2] != inst.model.name:
                raise InputError(f"the instance serves {inst.model.name!r}, not {t[2]!r}", where=path)
            return "field", ["model", "moe_imbalance"]
        if len(t) == 4 and t[1] == "chips" and t[3] in CHIP_FIELDS:
            return "fleet", [_fleet_index(inst, t[2], path), t[3]]
        raise InputError(
            "unknown catalog path; known: catalog.energy_profiles[P][CHIP].tflop_per_j|hbm_gb_per_j, "
            "catalog.models[M].moe_imbalance, catalog.chips[CHIP].<price, embodied or eff field>",
            where=path,
        )
    if t[0] == "fleet":
        if len(t) != 3:
            raise InputError("a fleet path is fleet[chip].field", where=path)
        field = "chips" if t[2] == "inventory" else t[2]
        i = _fleet_index(inst, t[1], path)
        if field == "chips" and inst.fleet[i].pods:
            raise InputError(
                f"fleet entry {inst.fleet[i].chip} is given as pods; its inventory is the pods' healthy chips",
                where=path,
            )
        return "fleet", [i, field]
    return "field", t


def base_value(inst: Instance, path: str) -> Any:
    """The value ``path`` has in ``inst`` (the catalog's value where the instance keeps it)."""
    kind, args = _resolve(inst, path)
    if kind == "energy":
        chip, field = args
        ov = next((o for o in inst.energy.chip_overrides if o.chip == chip), None)
        if ov is not None and getattr(ov, field) is not None:
            return float(getattr(ov, field))
        es = energy_spec(get_chip(chip), inst.energy.profile)
        if es.profile == "neuscale":  # the paper's figure itself (read all-in by the catalog)
            from neuscale_opt.catalog import neuscale_row

            return float(neuscale_row(chip)[field])
        return 1.0 / (es.j_per_flop * 1e12) if field == "tflop_per_j" else 1.0 / (es.j_per_hbm_byte * 1e9)
    if kind == "fleet":
        i, field = args
        entry = inst.fleet[i]
        if field not in type(entry).model_fields:
            raise InputError(f"fleet entries have no field {field!r}", where=path)
        v = getattr(entry, field)
        if v is None and field in CHIP_FIELDS:
            chip = get_chip(entry.chip)
            if field == "price_usd_per_chip_hour" and inst.energy.price == "commit_3y":
                return chip.price_3y_usd_per_chip_hour
            return getattr(chip, field)
        return v
    node: Any = inst
    for j, part in enumerate(args):
        fields = getattr(type(node), "model_fields", None)
        if fields is None or part not in fields:
            raise InputError("no such field in the instance", where=path)
        node = getattr(node, part)
        if node is None and j < len(args) - 1:
            raise InputError(f"{part} is not set in the base instance", where=path)
    if node is None and args == ["model", "moe_imbalance"]:
        return get_model(inst.model.name).moe_imbalance
    return node


def apply_values(inst: Instance, values: dict[str, Any], where: str = "sweep") -> Instance:
    """A new instance with each ``path: value`` of ``values`` set (validated like a file)."""
    data = inst.model_dump(mode="json")
    for path, value in values.items():
        kind, args = _resolve(inst, path)
        if kind == "energy":
            chip, field = args
            ovs = data["energy"]["chip_overrides"]
            row = next((o for o in ovs if o["chip"] == chip), None)
            if row is None:
                row = {"chip": chip}
                ovs.append(row)
            row[field] = value
        elif kind == "fleet":
            i, field = args
            data["fleet"][i][field] = value
        else:
            node = data
            for part in args[:-1]:
                if not isinstance(node, dict) or part not in node:
                    raise InputError("no such field in the instance", where=path)
                if node[part] is None:
                    raise InputError(f"{part} is not set in the base instance", where=path)
                node = node[part]
            if not isinstance(node, dict) or args[-1] not in node:
                raise InputError("no such field in the instance", where=path)
            node[args[-1]] = value
    for ov in data["energy"]["chip_overrides"]:
        ov.setdefault("tflop_per_j", None)
        ov.setdefault("hbm_gb_per_j", None)
    new = parse_instance(data, where=where)
    new._path = inst.path
    return new
