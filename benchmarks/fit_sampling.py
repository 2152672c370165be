"""Does the reference code's fit sample change ProGCL's weights? (docs/reproduction.md, (2))

The papers' code fits the Beta mixture on every row × 100 random columns of the fit
epoch's inter-view cosine matrix (positives included), with exactly 10 EM iterations from
the initial values. :meth:`ProGCLLoss.fit` fits on ``num_samples`` (50,000) off-diagonal
pairs of a 64-column grid, at most 10 iterations (``tol`` 1e-7). This script takes the fit
epoch's views that a ``--schedule frozen`` checkpoint stores, fits both ways
``--draws`` times each, and prints the fitted parameters and how far the weights
``w = b / mean b`` of ``--anchors`` random anchors move: between two of our draws (the
noise floor) and between ours and the reference's sample.

    python benchmarks/fit_sampling.py runs/cs1000/progcl/seed0.pt runs/cs300/ckpt_guard_seed0/seed0.pt
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from pyg_progcl import BetaMixture, ProGCLLoss
from pyg_progcl.cli.build import build_loss
from pyg_progcl.cli.presets import TrainConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402  (the benchmarks' shared machine description)
from tau_sensitivity import hardness  # noqa: E402

REFERENCE_COLUMNS = 100


def reference_sample(u: torch.Tensor, v: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Every row of ``REFERENCE_COLUMNS`` random columns of ``u vᵀ``, positives included."""
    cols = torch.randperm(u.size(0), generator=g)[:REFERENCE_COLUMNS]
    return (u @ v[cols].T).flatten().clamp(-1.0, 1.0)


def fit(theta: torch.Tensor, config: dict, tol: float) -> BetaMixture:
    """The run's mixture (its options, as the trainer builds it) fitted with 10 EM
    iterations from the initial values, stopping early only on a change below ``tol`` (the
    reference's sample; ours is the run's loss's own :meth:`ProGCLLoss.refit`)."""
    mixture = build_loss(_train_config(config)).mixture
    mixture.tol = tol
    return mixture.fit((theta + 1) / 2, max_iter=10)


def _train_config(config: dict) -> TrainConfig:
    return TrainConfig.from_dict({**TrainConfig.defaults(), **config})


def weights(mixture: BetaMixture, u, v, anchors: torch.Tensor, tau: float) -> torch.Tensor:
    """``w_ik = b_ik / mean_{j≠i} b_ij`` of the given anchors (their own column zeroed)."""
    loss = ProGCLLoss(tau, mixture=mixture)
    b = hardness(loss, u[anchors] @ v.T)
    b[torch.arange(anchors.numel()), anchors] = 0.0
    return b / (b.sum(1, keepdim=True) / (u.size(0) - 1))


def describe(m: BetaMixture) -> str:
    hi = 1 - m.true_negative_index
    lo = m.true_negative_index
    return (
        f"{m.weight[hi]:.3f} | {m.alpha[hi]:.2f}, {m.beta[hi]:.2f} "
        f"| {m.alpha[lo]:.2f}, {m.beta[lo]:.2f} | {m.n_iter_}"
    )


def relative_change(w: torch.Tensor, other: torch.Tensor) -> float:
    """``Σ|w - other| / Σ|w|``."""
    return ((w - other).abs().sum() / w.abs().sum()).item()


def compare(w: torch.Tensor, other: torch.Tensor) -> str:
    corr = torch.corrcoef(torch.stack([w.flatten(), other.flatten()]))[0, 1].item()
    return f"{100 * relative_change(w, other):.2f} % | {corr:.5f}"


def run(path: Path, draws: int, num_anchors: int) -> list[str]:
    state = torch.load(path, weights_only=True)
    config, loss = state["config"], state["loss"]
    u, v = loss["schedule.frozen_u"].float(), loss["schedule.frozen_v"].float()
    g = torch.Generator().manual_seed(0)
    anchors = torch.randperm(u.size(0), generator=g)[:num_anchors]
    name = f"{config['dataset']}, fit at epoch {config['warmup_epochs'] + 1}"
    ours = [build_loss(_train_config(config)).refit(u, v, g).mixture for _ in range(draws)]
    refs = [fit(reference_sample(u, v, g), config, 0.0) for _ in range(draws)]
    w_ours = [weights(m, u, v, anchors, config["tau"]) for m in ours]
    w_refs = [weights(m, u, v, anchors, config["tau"]) for m in refs]
    rows = []
    for label, fits, ws in (("ours", ours, w_ours), ("reference", refs, w_refs)):
        for i, m in enumerate(fits):
            versus = compare(w_ours[0], ws[i]) if (label, i) != ("ours", 0) else "– | –"
            rows.append(f"| {name} | {label} {i} | {describe(m)} | {versus} |")
    rows.append(
        f"| {name} | Δw median: ours {_median(w_ours[0], w_ours[1:])}, reference "
        f"{_median(w_ours[0], w_refs)} | | | | | | |"
    )
    return rows


def _median(w: torch.Tensor, others: list[torch.Tensor]) -> str:
    rel = [relative_change(w, o) for o in others]
    return f"{100 * statistics.median(rel):.2f} %" if rel else "–"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoints", nargs="+", type=Path, help="--schedule frozen checkpoints")
    p.add_argument("--draws", type=int, default=3, help="fits per sampling scheme")
    p.add_argument("--anchors", type=int, default=2000, help="anchors whose weights compare")
    p.add_argument("--output", type=Path)
    args = p.parse_args(argv)
    info = scale.machine("cpu")
    lines = [
        f"Machine: {info['cpu']}, torch {info['torch']}. Weights w = b / mean b of "
        f"{args.anchors} random anchors against all nodes; Δw = Σ|w - w_ours0| / Σ|w_ours0|.",
        "",
        "| views | fit | w_FN | α, β (FN) | α, β (TN) | EM iterations | Δw vs ours 0 | correlation |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path in args.checkpoints:
        lines += run(path, args.draws, args.anchors)
    text = "\n".join(lines)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
