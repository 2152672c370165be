"""ProGCL-weight under its fit schedules and variants, against GRACE on the same seeds.

ProGCL (Xia et al., "ProGCL: Rethinking Hard Negative Mining in Graph Contrastive
Learning", ICML 2022) weights negative ``k`` of anchor ``i`` by
``w_ik = b_ik / mean_j b_ij``, ``b = s' · p(true negative | s')`` (docs/algorithms.md §5.2). When the
mixture is fitted and which similarities ``b`` is computed from is a schedule choice:

* ``online``: the paper's schedule (docs/algorithms.md §5.4): refit every epoch after the warm-up,
  ``b`` from the current similarities at every step;
* ``floored``: the library's default, ``online`` until a refit degenerates, then with the
  posterior in ``b`` floored at 0.5 for the rest of training (``ProGCLLoss(schedule='floored')``);
* ``beta-guard``: ``online`` with the reference code's guard on the high-similarity
  component, ``β ≥ 1.01`` (:class:`~pyg_progcl.BetaMixture` ``min_beta_high``);
* ``frozen``: the reference code's schedule: one fit after the warm-up and the weights of
  that epoch frozen from then on (``ProGCLLoss(schedule='frozen')``, which recomputes them
  per row block from the two views of the fit epoch; earlier results came from a dense
  ``N×N`` copy of the same weights, equal to it to 1e-15 in float64);
* ``frozen-clean``: ``frozen`` whose fit is redone (cold) right after its epoch on the
  projected embeddings of the un-augmented graph: the frozen weights without one
  epoch's augmentation noise (a probe of why ``frozen`` loses on CiteSeer);
* ``floor-0.5``: ``online`` with ``floor=0.5`` (``OnlineFit(floor=0.5)``): no negative
  loses more than half its hardness, however sure the mixture is that it is a false
  negative;
* ``grace``: the baseline, the dataset's GRACE preset (on Cora / CiteSeer ProGCL runs on
  the same uniform augmentation; on Amazon / Coauthor it runs on GCA's adaptive one).

Each variant runs the dataset's ProGCL-weight preset through the trainer
(:func:`pyg_progcl.cli.train`; ``beta-guard`` through a ``loss_factory``) and writes the trainer's JSON
with a ``variant`` field, so that ``benchmarks/compare.py`` pairs the files by seed. The
table printed at the end is compare.py's::

    python benchmarks/schedules.py --dataset CiteSeer --epochs 400 --warmup-epochs 200 \\
        --seeds 0 1 2 --root DATA --output-dir runs/citeseer400
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

import torch  # noqa: E402
from _stamp import write_json  # noqa: E402
from compare import SCHEDULE_LABELS, load_runs, merge, table  # noqa: E402

from pyg_progcl import BetaMixture, ProGCLLoss  # noqa: E402
from pyg_progcl.cli import train  # noqa: E402
from pyg_progcl.cli.datasets import load_dataset  # noqa: E402
from pyg_progcl.cli.presets import TrainConfig, get_preset  # noqa: E402

#: The ``variant`` field of each variant's result file (``None``: compare.py labels the run
#: from its config's schedule and options).
LABELS = {
    "online": None,
    "floored": None,
    "beta-guard": "reference β guard",
    "frozen": SCHEDULE_LABELS["frozen"],
    "frozen-clean": "frozen weights of the un-augmented graph",
    "floor-0.5": None,  # (compare.py labels it from the config's floor)
    "grace": None,
}


#: The fit schedule of the variants that are not a schedule of their own (others: their name).
SCHEDULE_OF = {"frozen-clean": "frozen", "beta-guard": "online", "floor-0.5": "online"}


def loss_factory(variant: str):
    """The trainer's ``loss_factory`` of a schedule (``None``: the config's loss)."""
    if variant != "beta-guard":
        return None

    def build(c: TrainConfig) -> ProGCLLoss:
        kwargs = dict(tau=c.tau, block_size=c.block_size, num_negatives=c.num_negatives)
        if c.num_samples is not None:
            kwargs["num_samples"] = c.num_samples
        return ProGCLLoss(mixture=BetaMixture(min_beta_high=1.01), **kwargs)

    return build


def clean_refit(config: TrainConfig, data):
    """The ``frozen-clean`` variant's trainer callback: after the epoch of the first fit,
    the frozen loss is refitted (cold) on the projected embeddings of the un-augmented
    graph, both views alike, so that its weights no longer carry that epoch's edge drops
    and feature masks."""

    def callback(epoch: int, info: dict) -> None:
        if epoch == config.warmup_epochs + 1:
            model, loss = info["model"], info["loss_fn"]
            with torch.no_grad():
                z = model.project(model(data.x, data.edge_index))
            loss.reset_parameters()
            loss.fit(z, z)

    return callback


def run(variant: str, args: argparse.Namespace) -> Path:
    method = "grace" if variant == "grace" else "progcl-weight"
    overrides = {"epochs": args.epochs}
    if method != "grace" and args.warmup_epochs is not None:
        overrides["warmup_epochs"] = args.warmup_epochs
    if method != "grace":
        overrides["schedule"] = SCHEDULE_OF.get(variant, variant)
    if variant == "floor-0.5":
        overrides["floor"] = 0.5
    config = get_preset(args.dataset, method, **overrides)
    data = load_dataset(config.dataset, args.root)
    callback = clean_refit(config, data) if variant == "frozen-clean" else None
    result = train(
        config, data, seeds=args.seeds, device=args.device, progress=False,
        loss_factory=loss_factory(variant), callback=callback,
    )  # fmt: skip
    if LABELS[variant]:
        result = {"variant": LABELS[variant], **result}
    seeds = "-".join(str(s) for s in (args.seeds[0], args.seeds[-1]))
    path = args.output_dir / f"{args.dataset}_{args.epochs}_{variant}_seeds{seeds}.json"
    write_json(result, path)
    accs = ", ".join(f"{100 * a:.2f}" for a in result["accuracies"])
    print(f"{variant}: {accs} (wrote {path})", flush=True)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="CiteSeer")
    parser.add_argument("--root", default=None, help="data root (see pyg_progcl.cli.datasets)")
    parser.add_argument("--epochs", type=int, default=400)
    parser.add_argument("--warmup-epochs", type=int, default=None, help="default: the preset's")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(LABELS), choices=list(LABELS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--output-dir", type=Path, default=HERE / "results" / "schedules")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    paths = [run(variant, args) for variant in args.variants]
    print(table(merge([r for p in paths for r in load_runs(p)]), "grace"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
