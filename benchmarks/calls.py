"""How a GPU would see a step, counted on any device: operator calls, host reads, products.

Every outermost ``aten`` call of a step (an ``aten`` event of ``torch.profiler`` whose parent
is not one) is a kernel launch or a view on a GPU; a host read (``.item()``, ``bool(t)``,
``nonzero``, ``tolist``, ...) makes the host wait for the device; products are the
``mm``-family calls at any depth. Counted for

* each loss's step (forward and backward) on random views of ``N`` nodes, ``d = 128``
  (``--nodes``: the same counts at two sizes show that nothing grows with ``N``), and
  ProGCL's refit;
* a training step on Cora (both views, the loss, backward, Adam) with the package's model
  and, given ``--reference`` (a clone of https://github.com/junxia97/ProGCL), with the
  authors' code on the same graph and hyper-parameters::

    python benchmarks/calls.py --reference /tmp/ProGCL --out benchmarks/results/calls.md

The counts do not depend on the machine's speed (only on torch's and PyG's versions).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

sys.modules.setdefault("outdated", None)  # (ogb's version check, through PyG's imports)

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import pyg_progcl as P  # noqa: E402

#: Operators that read a device value on the host (``_local_scalar_dense`` is what
#: ``item`` and ``bool`` reach: counted once per read).
HOST_READS = {"aten::item", "aten::is_nonzero", "aten::nonzero", "aten::nonzero_static",
              "aten::equal", "aten::allclose", "aten::tolist"}  # fmt: skip
PRODUCTS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addmm_"}


def count(fn) -> tuple[int, int, int]:
    """``(calls, host reads, products)`` of one call of ``fn``."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    outer = [
        e for e in events if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")
    ]
    names = Counter(e.name for e in events)
    reads = sum(names[k] for k in HOST_READS if k != "aten::is_nonzero")
    reads += max(0, names["aten::_local_scalar_dense"] - names["aten::item"])
    return len(outer), reads, sum(names[k] for k in PRODUCTS)


LOSSES = {
    "InfoNCE": lambda: P.InfoNCELoss(0.4),
    "DCL": lambda: P.DebiasedInfoNCELoss(0.4),
    "HCL": lambda: P.HardInfoNCELoss(0.4),
    "ProGCL-weight": lambda: P.ProGCLLoss(0.4, mode="weight"),
    "ProGCL-mix": lambda: P.ProGCLLoss(0.4, mode="mix"),
}


def loss_rows(sizes) -> list[dict]:
    rows = []
    for name, make in LOSSES.items():
        for n in sizes:
            torch.manual_seed(0)
            h1 = torch.randn(n, 128, requires_grad=True)
            h2 = (h1.detach() + 0.5 * torch.randn(n, 128)).requires_grad_()
            loss = make()
            progcl = isinstance(loss, P.ProGCLLoss)
            if progcl:
                loss.fit(h1.detach(), h2.detach())
            loss(h1, h2).backward()  # (warm-up)
            calls, reads, products = count(lambda f=loss, a=h1, b=h2: f(a, b).backward())
            row = {"loss": name, "nodes": n, "calls": calls, "host_reads": reads,
                   "products": products, "path": loss.plan(h1).path}  # fmt: skip
            if progcl:
                refit = lambda f=loss, a=h1, b=h2: f.fit(a.detach(), b.detach())  # noqa: E731
                row["refit_calls"], row["refit_host_reads"], _ = count(refit)
                row["refit_iterations"] = loss.mixture.n_iter_
                tol, loss.mixture.tol = loss.mixture.tol, 0.0  # (all iterations run)
                row["refit_all_calls"], row["refit_all_host_reads"], _ = count(refit)
                loss.mixture.tol = tol
            rows.append(row)
    return rows


def cora(root: str):
    import shutil
    import tempfile

    import torch_geometric.transforms as T
    from torch_geometric.datasets import Planetoid

    copy = tempfile.mkdtemp()
    shutil.copytree(Path(root) / "planetoid" / "Cora", Path(copy) / "Cora")
    return Planetoid(copy, "Cora", transform=T.NormalizeFeatures())[0]


def package_step(data, method: str):
    """The package's training step (GRACE's Cora hyper-parameters)."""
    model = P.GRACEModel(
        P.GCNEncoder(data.num_features, 128), 128, 128,
        augment1=[P.EdgeDrop(0.2), P.FeatureMask(0.3)],
        augment2=[P.EdgeDrop(0.4), P.FeatureMask(0.4)],
    )  # fmt: skip
    loss = P.InfoNCELoss(0.4) if method == "grace" else P.ProGCLLoss(0.4, mode=method)
    opt = torch.optim.Adam(model.parameters(), lr=5e-4, weight_decay=1e-5)
    if method != "grace":
        with torch.no_grad():
            loss.fit(*model.views(data.x, data.edge_index))

    def step():
        h1, h2 = model.views(data.x, data.edge_index)
        out = loss(h1, h2)
        opt.zero_grad()
        out.backward()
        opt.step()

    return step


def drop_feature(x, p: float):
    """The authors' ``pGRACE.functional.drop_feature``, the same operations (their module
    imports torch_scatter, which this benchmark does not need)."""
    mask = torch.empty((x.size(1),), dtype=torch.float32, device=x.device).uniform_(0, 1) < p
    x = x.clone()
    x[:, mask] = 0
    return x


def reference_step(data, method: str, reference: Path):
    """The authors' training step of their train.py (uniform edge drop), same graph."""
    sys.path.insert(0, str(reference))
    from pGRACE.model import GRACE, BetaMixture1D, Encoder
    from torch_geometric.nn import GCNConv
    from torch_geometric.utils import dropout_edge

    encoder = Encoder(data.num_features, 128, torch.nn.ReLU(), base_model=GCNConv, k=2)
    model = GRACE(encoder, 128, 128, tau=0.4)
    opt = torch.optim.Adam(model.parameters(), lr=5e-4, weight_decay=1e-5)
    mode = "weight" if method == "grace" else method
    args = SimpleNamespace(epoch_start=0 if method != "grace" else 10**9, mode=mode, sel_num=1000)
    f64 = {"dtype": torch.float64}
    bmm = BetaMixture1D(10, torch.tensor([1.0, 2.0], **f64), torch.tensor([2.0, 1.0], **f64),
                        torch.tensor([0.85, 0.15], **f64))  # fmt: skip

    def step(epoch=1):
        opt.zero_grad()
        e1 = dropout_edge(data.edge_index, p=0.2)[0]
        e2 = dropout_edge(data.edge_index, p=0.4)[0]
        x1, x2 = drop_feature(data.x, 0.3), drop_feature(data.x, 0.4)
        z1, z2 = model(x1, e1), model(x2, e2)
        model.loss(z1, z2, epoch, args, bmm).backward()
        opt.step()

    if method != "grace":
        step(0)  # (epoch_start: the fit)
    return step


def training_rows(data, reference) -> list[dict]:
    rows = []
    for method in ("grace", "weight", "mix"):
        codes = [("pyg_progcl", package_step(data, method))]
        if reference is not None:
            codes.append(("authors' code", reference_step(data, method, reference)))
        for code, step in codes:
            torch.manual_seed(0)
            step()
            step()
            calls, reads, products = count(step)
            rows.append({"method": method, "code": code, "calls": calls,
                         "host_reads": reads, "products": products})  # fmt: skip
    return rows


def markdown(losses: list[dict], training: list[dict]) -> str:
    out = ["# Calls, host reads and products per step", "",
           f"torch {torch.__version__}; counted with `benchmarks/calls.py`. Host reads as the "
           "CPU shows them: a `tolist()` of a CPU tensor (the refit's one read of its result) "
           "and the graph check's copy to the host are not among them; on a GPU they are.", "",
           "| loss | N | path | calls | host reads | products | refit calls | refit host reads |",
           "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in losses:
        out.append(
            f"| {r['loss']} | {r['nodes']} | {r['path']} | {r['calls']} | {r['host_reads']} "
            f"| {r['products']} | {r.get('refit_calls', '')} | {r.get('refit_host_reads', '')} |"
        )
    refits = [r for r in losses if "refit_calls" in r]
    if refits:
        r = refits[-1]
        out += ["", f"ProGCL's refit ({r['loss']}, N = {r['nodes']}: 50,000 sampled similarities, "
                "at most 10 warm-started EM iterations), calls / host reads: "
                f"{r['refit_calls']} / {r['refit_host_reads']} where it converged after "
                f"{r['refit_iterations']} iterations, {r['refit_all_calls']} / "
                f"{r['refit_all_host_reads']} where it runs all 10."]  # fmt: skip
    out += ["", "Training step on Cora (views, loss, backward, Adam):", "",
            "| method | code | calls | host reads | products |", "|---|---|---|---|---|"]  # fmt: skip
    for r in training:
        out.append(
            f"| {r['method']} | {r['code']} | {r['calls']} | {r['host_reads']} | {r['products']} |"
        )
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2048, 7650])
    parser.add_argument("--data", default=None, help="data root holding planetoid/Cora")
    parser.add_argument("--reference", type=Path, default=None, help="a clone of the authors' code")
    parser.add_argument("--out", type=Path, default=None, help="markdown table to write")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    losses = loss_rows(args.nodes)
    import os

    root = args.data or os.environ.get("PYG_PROGCL_SHARED_DATA")
    training = training_rows(cora(root), args.reference) if root else []
    text = markdown(losses, training)
    print(text)
    print(json.dumps({"losses": losses, "training": training}))
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
