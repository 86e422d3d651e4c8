"""The ``export`` command: a plan JSON as GKE node pools, Kubernetes workloads and scale actions.

``neuscale-opt export PLAN.json --format gke|csv --out DIR [--machine-type GEN=TYPE ...]
[--model NAME] [--instance TOML] [--max-model-len N] [--image-tpu IMAGE] [--image-gpu IMAGE]``

The logic lives in :mod:`neuscale_opt.export`; this module only parses arguments. The served model is
not in the plan: ``--model`` takes a catalog model (written as its Hugging Face id) or any id vLLM
accepts; without it the model of ``--instance``, else of the instance the plan records, else of the
embedded default instance is used. Exit codes: 0 written, 2 bad input (nothing written).
"""

from __future__ import annotations

import argparse
import sys

from neuscale_opt.cli import Command


def _export_args(p: argparse.ArgumentParser) -> None:
    from neuscale_opt.export import DEFAULT_IMAGE_GPU, DEFAULT_IMAGE_TPU, FORMATS

    p.add_argument("plan", help="plan JSON written by `neuscale-opt plan --json`")
    p.add_argument("--format", choices=FORMATS, default="gke", help="gke: YAML per epoch (default); csv: tidy tables")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (replaced as a whole)")
    p.add_argument(
        "--machine-type",
        action="append",
        default=[],
        metavar="GEN=TYPE",
        help="machine type of a generation, e.g. tpu-v6e=ct6e-standard-4t (default: data/gke_machine_types.csv)",
    )
    p.add_argument("--model", default=None, help="catalog model or Hugging Face id for vLLM --model")
    p.add_argument(
        "--instance", default=None, help="instance whose model is served (default: the plan's, else the embedded one)"
    )
    p.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        metavar="N",
        help="vLLM --max-model-len (default: the catalog model's context length)",
    )
    p.add_argument("--image-tpu", default=DEFAULT_IMAGE_TPU, help=f"vLLM image on TPUs (default {DEFAULT_IMAGE_TPU})")
    p.add_argument("--image-gpu", default=DEFAULT_IMAGE_GPU, help=f"vLLM image on GPUs (default {DEFAULT_IMAGE_GPU})")
    p.set_defaults(func=cmd_export)


COMMANDS: dict[str, Command] = {
    "export": Command(
        "write a plan as GKE node pools, Kubernetes workloads and scale actions (YAML or CSV)", _export_args
    ),
}


def served_model(model: str | None, instance: str | None, plan_path: str | None = None) -> tuple[str, int | None]:
    """(vLLM ``--model`` value, catalog context length or None) from ``--model`` / ``--instance``,
    else the model of the instance the plan records in its provenance, else the embedded default's."""
    from neuscale_opt.catalog import load_models

    if model is None:
        from neuscale_opt.instance import load_instance

        if instance is None and plan_path is not None:
            import os

            from neuscale_opt.cli.plan import read_plan
            from neuscale_opt.provenance import recorded_instance

            rec = recorded_instance(read_plan(plan_path))
            instance = rec["path"] if rec is not None and os.path.isfile(rec["path"]) else None
        model = load_instance(instance).model.name
    spec = load_models().get(model)
    if spec is None:
        return model, None
    return _hf_id(model), spec.max_context


def _hf_id(name: str) -> str:
    import io
    from importlib import resources

    import pandas as pd

    text = resources.files("neuscale_opt.data").joinpath("models.csv").read_text(encoding="utf-8")
    df = pd.read_csv(io.StringIO(text), usecols=["name", "hf_id"], dtype=str)
    return str(df.loc[df["name"] == name, "hf_id"].iloc[0])


def cmd_export(args: argparse.Namespace) -> int:
    from neuscale_opt.export import export_plan, make_options

    model, context = served_model(args.model, args.instance, args.plan)
    options = make_options(
        model,
        args.machine_type,
        max_model_len=args.max_model_len if args.max_model_len is not None else context,
        image_tpu=args.image_tpu,
        image_gpu=args.image_gpu,
    )
    exp, files = export_plan(args.plan, args.out, args.format, options)
    n_pools = exp.nodepools.groupby("epoch")["pool"].nunique().max() if len(exp.nodepools) else 0
    sys.stdout.write(
        f"export ({args.format}): {len(exp.epochs)} epochs, up to {n_pools} node pools and "
        f"{exp.workloads['workload'].nunique() if len(exp.workloads) else 0} workloads, "
        f"{len(exp.actions)} scale actions; {len(files)} files in {args.out}\n"
    )
    for note in exp.notes:
        sys.stdout.write(f"note: {note}\n")
    return 0
