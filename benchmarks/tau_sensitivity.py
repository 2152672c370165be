"""How much ProGCL-weight changes GRACE's loss, as a function of the temperature τ.

On both tuning grids (``benchmarks/results/tune_cora.md``, ``tune_citeseer.md``) ProGCL's
margin over GRACE shrinks as τ grows. This measures, at fixed embeddings, how far
ProGCL-weight's loss departs from GRACE's (InfoNCE) at each τ: GRACE is trained with the
dataset's preset for ``--epochs`` (the ProGCL warm-up, where the re-weighting begins),
then for a few augmentation draws both losses take the same two projected views, ProGCL's
mixture fitted on them (Xia et al., ICML 2022: ``w_ik = b_ik / mean_j b_ij``, ``b = s' ·
p(true neg. | s')``). Per τ it prints

* ``grad``: ``‖∇ProGCL − ∇GRACE‖ / ‖∇GRACE‖``, the gradients with respect to both views;
* ``cos``: the cosine between those two gradients;
* ``Ng``: the mean over anchors of ``|Σ_k w_ik e^{s_ik/τ} − Σ_k e^{s_ik/τ}| / Σ_k e^{s_ik/τ}``
  over the inter-view negatives, how much the re-weighting moves the denominator.

Dense ``N×N`` weights: meant for Cora / CiteSeer-sized graphs::

    python benchmarks/tau_sensitivity.py --datasets Cora CiteSeer --root DATA
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing
sys.modules.setdefault("outdated", None)  # ogb's network version check

from _stamp import machine  # noqa: E402

from pyg_progcl import InfoNCELoss, ProGCLLoss  # noqa: E402
from pyg_progcl.cli.datasets import load_dataset  # noqa: E402
from pyg_progcl.cli.loop import train_seed  # noqa: E402
from pyg_progcl.cli.presets import get_preset  # noqa: E402

TAUS = (0.2, 0.3, 0.4, 0.5, 0.7, 0.9, 1.2)


def view_gradient(loss: torch.nn.Module, h1: torch.Tensor, h2: torch.Tensor) -> torch.Tensor:
    """The gradient of ``loss(h1, h2)`` with respect to both views, flattened."""
    a, b = h1.detach().clone().requires_grad_(), h2.detach().clone().requires_grad_()
    loss(a, b).backward()
    return torch.cat([a.grad.flatten(), b.grad.flatten()])


@torch.no_grad()
def hardness(loss: ProGCLLoss, cosine: torch.Tensor) -> torch.Tensor:
    """ProGCL's hardness ``b = s' · p(true neg. | s')``, ``s' = (θ + 1) / 2``, of the cosines
    ``θ`` (any shape) under the loss's mixture and its schedule's posterior floor; a new
    tensor (``cosine`` is left as it is)."""
    return loss.mixture.hardness_(cosine.add(1.0).mul_(0.5), loss.schedule.posterior_floor)


@torch.no_grad()
def negative_weights(loss: ProGCLLoss, h1: torch.Tensor, h2: torch.Tensor) -> torch.Tensor:
    """Dense ``[N, N]`` weights ``w_ik = b_ik / mean_{j≠i} b_ij`` of the anchors
    ``u_i = h1[i]``: ``b`` the :func:`hardness` of the cosines ``θ(u_i, v_k)`` of the
    L2-normalised views, the diagonal 0. Before the loss is fitted every weight is 1
    (GRACE's)."""
    n = h1.size(0)
    if not loss.fitted:
        return 1.0 - torch.eye(n, dtype=h1.dtype, device=h1.device)
    u, v = F.normalize(h1, dim=1), F.normalize(h2, dim=1)
    b = hardness(loss, u @ v.T).fill_diagonal_(0.0)
    return b / (b.sum(1, keepdim=True) / (n - 1))


def denominator_shift(loss: ProGCLLoss, h1: torch.Tensor, h2: torch.Tensor) -> float:
    """Mean relative change of the inter-view negative sum under ProGCL's weights."""
    with torch.no_grad():
        w = negative_weights(loss, h1, h2)
        s = F.normalize(h1, dim=1) @ F.normalize(h2, dim=1).T
        e = torch.exp(s / loss.tau).fill_diagonal_(0.0)
        return (((w * e).sum(1) - e.sum(1)).abs() / e.sum(1)).mean().item()


def compare(h1: torch.Tensor, h2: torch.Tensor, tau: float, seed: int) -> tuple[float, ...]:
    """``(grad, cos, Ng)`` of ProGCL-weight against GRACE at ``tau`` on one pair of views."""
    progcl = ProGCLLoss(tau).fit(h1, h2, torch.Generator().manual_seed(seed))
    g, p = view_gradient(InfoNCELoss(tau), h1, h2), view_gradient(progcl, h1, h2)
    rel = ((p - g).norm() / g.norm()).item()
    return rel, F.cosine_similarity(p, g, dim=0).item(), denominator_shift(progcl, h1, h2)


def measure(name: str, root, epochs: int, draws: int, taus) -> tuple[float, dict]:
    """Trains GRACE's preset for ``epochs``; per τ, the mean of :func:`compare` over draws."""
    config = get_preset(name, "grace", epochs=epochs)
    data = load_dataset(name, root)
    model, _, _ = train_seed(config, data, seed=0, progress=False)
    model.train()  # the augmented views the losses see in training
    rows = {tau: [] for tau in taus}
    for draw in range(draws):  # one pair of views per draw, shared by every τ
        torch.manual_seed(100 + draw)
        with torch.no_grad():
            h1, h2 = model.views(data)
        for tau in taus:
            rows[tau].append(compare(h1, h2, tau, draw))
    return config.tau, {tau: torch.tensor(r).mean(0).tolist() for tau, r in rows.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["synthetic"])
    parser.add_argument("--root", default=None, help="data root (see pyg_progcl.cli.datasets)")
    parser.add_argument("--epochs", type=int, default=100, help="GRACE epochs first")
    parser.add_argument("--draws", type=int, default=3, help="augmentation draws per τ")
    parser.add_argument("--taus", type=float, nargs="+", default=list(TAUS))
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    info = machine()
    print(f"Machine: {info['cpu']}, {info['cores']} cores; torch {torch.__version__}, "
          f"{info['torch_threads']} threads")  # fmt: skip
    for name in args.datasets:
        trained_tau, table = measure(name, args.root, args.epochs, args.draws, args.taus)
        print(f"\n{name}: GRACE preset (τ {trained_tau}) after {args.epochs} epochs, seed 0; "
              f"means over {args.draws} augmentation draws\n")  # fmt: skip
        print("| τ | grad: ‖∇ProGCL − ∇GRACE‖ / ‖∇GRACE‖ | cos(∇ProGCL, ∇GRACE) | Ng shift |")
        print("|---|---|---|---|")
        for tau, (rel, cos, shift) in table.items():
            print(f"| {tau} | {rel:.3f} | {cos:.4f} | {shift:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
