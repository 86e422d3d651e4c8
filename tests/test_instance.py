"""Instance files: validation at the boundary, one-line errors naming the field."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from neuscale_opt.errors import InputError
from neuscale_opt.instance import default_instance_path, load_instance, parse_instance

INSTANCES = Path(__file__).resolve().parents[1] / "instances"

BASE = """
name = "t"
[model]
name = "Llama-3-8B"
[[fleet]]
chip = "tpu-v5e"
chips = 8
[workload]
[[workload.classes]]
name = "a"
input_tokens = 100
output_tokens = 10
[[workload.demand]]
epoch = 0
bucket = "a"
rate_rps = 1.0
"""


def write(tmp_path, text: str):
    p = tmp_path / "inst.toml"
    p.write_text(text)
    return p


def test_shipped_instances_validate():
    for p in sorted(INSTANCES.glob("*.toml")):
        inst = load_instance(p)
        assert inst.fleet


def test_embedded_default_is_the_repository_default():
    assert default_instance_path().read_bytes() == (INSTANCES / "default.toml").read_bytes()
    inst = load_instance(None)
    assert inst.name == "default" and inst.model.name == "Llama-3-70B"
    assert set(inst.chip_names) == {"tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e"}


def test_normalised_instance_reports_healthy_chips():
    inst = load_instance(INSTANCES / "default.toml")
    d = inst.normalised()
    assert d["derived"]["healthy_chips"] == {"tpu-v4": 126, "tpu-v5e": 253, "tpu-v5p": 64, "tpu-v6e": 256}
    assert d["derived"]["failed_chips"]["tpu-v5e"] == 3
    assert d["slo"]["multiplier"] == 5.0  # defaults filled in


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda s: s.replace('name = "Llama-3-8B"', 'name = "Llama-9"'), "model"),
        (lambda s: s.replace("chips = 8", "chips = -8"), "fleet[0].chips"),
        (lambda s: s.replace("chips = 8", "chips = 0"), "fleet[0].chips"),
        (lambda s: s.replace('chip = "tpu-v5e"', 'chip = "tpu-v9"'), "fleet[0]"),
        (lambda s: s + "\n[solver]\nbogus = 1\n", "solver.bogus"),
        (lambda s: s.replace('name = "t"', 'name = "t"\ncolour = "red"'), "colour"),
        (lambda s: s.replace("input_tokens = 100", "input_tokens = 0"), "workload.classes[0].input_tokens"),
        (lambda s: s.replace('bucket = "a"', 'bucket = "zz"'), "workload"),
        (lambda s: s.replace("rate_rps = 1.0", "rate_rps = -1.0"), "workload.demand[0].rate_rps"),
        (lambda s: s + '\n[slo]\nreference_chip = "tpu-v1"\n', "slo"),
        (lambda s: s + '\n[energy]\nprofile = "solar"\n', "energy"),
        (lambda s: s + '\n[slo]\nreference_chip = "tpu-v5e"\nreference_shape = "3x3"\n', "not allowed on tpu-v5e"),
        (lambda s: s + "\n[search]\nbatch_sizes = [0, 1]\n", "search"),
    ],
)
def test_bad_fields_are_named(tmp_path, edit, field):
    p = write(tmp_path, edit(BASE))
    with pytest.raises(InputError) as ei:
        load_instance(p)
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith(str(p)), msg
    assert field in msg, msg


def test_pods_failed_chip_outside_and_bad_dims(tmp_path):
    pods = BASE.replace("chips = 8", "[[fleet.pods]]\ndims = [16, 16]\nfailed_chips = [[3, 16]]")
    with pytest.raises(InputError, match=r"fleet\[0\]\.pods\[0\].*failed_chips\[0\] \[3, 16\] lies outside"):
        load_instance(write(tmp_path, pods))
    dims = BASE.replace("chips = 8", "[[fleet.pods]]\ndims = [8, 8]")
    with pytest.raises(InputError, match=r"fleet\[0\].*pods\[0\]\.dims \[8, 8\]: a tpu-v5e pod is \[16, 16\]"):
        load_instance(write(tmp_path, dims))
    cube = BASE.replace('chip = "tpu-v5e"', 'chip = "tpu-v4"').replace("chips = 8", "[[fleet.pods]]\ndims = [4, 4, 6]")
    with pytest.raises(InputError, match="4x4x4 cubes"):
        load_instance(write(tmp_path, cube))


def test_malformed_toml_and_missing_file(tmp_path):
    with pytest.raises(InputError, match="malformed TOML"):
        load_instance(write(tmp_path, "name = \n"))
    with pytest.raises(InputError, match="no such file"):
        load_instance(tmp_path / "nope.toml")


def test_instance_is_frozen():
    inst = parse_instance(tomllib.loads(BASE))
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError on frozen models
        inst.name = "x"


def test_node_limit_defaults_and_instance_key(tmp_path):
    from neuscale_opt.alloc.options import DEFAULT_NODE_LIMIT, MAX_NODE_LIMIT, PlanOptions

    assert PlanOptions().node_limit == DEFAULT_NODE_LIMIT and PlanOptions(node_limit=None).node_limit is None
    p = tmp_path / "i.toml"
    p.write_text(BASE)
    assert PlanOptions.from_instance(load_instance(p)).node_limit == DEFAULT_NODE_LIMIT
    assert PlanOptions.from_instance(load_instance(p), node_limit=7).node_limit == 7
    p.write_text(BASE + "[solver]\nnode_limit = 250\n")
    assert PlanOptions.from_instance(load_instance(p)).node_limit == 250
    for bad in ("0", "1.5", "true", str(MAX_NODE_LIMIT + 1)):
        p.write_text(BASE + f"[solver]\nnode_limit = {bad}\n")
        with pytest.raises(InputError) as err:
            load_instance(p)
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith(str(p)) and "solver.node_limit" in msg, msg
