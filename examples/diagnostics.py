"""False-negative diagnostics: ProGCL's evidence, measured on your own graph.

Trains GRACE briefly, then ``diagnose(model, data)`` samples inter-view negative pairs,
labels each a false negative when both nodes share a class, fits a two-component Beta
mixture to the similarities, and summarises: ``fn_rate`` (chance: the share of false
negatives among all negatives), ``fn_share_topk`` (among each anchor's 10 most similar
negatives; ProGCL's claim is that it is far above chance under message passing),
``auc_similarity`` / ``auc_posterior`` (how well similarity / the mixture's p(true neg.)
tell true from false negatives; 0.5 is chance). ``plot_similarity_histogram`` draws the
two histograms and the fitted mixture into a PNG (needs matplotlib).

Run:  python examples/diagnostics.py --out similarity.png  # a synthetic graph
      python examples/diagnostics.py --dataset Cora --root data --epochs 100
"""

import argparse

import torch
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid

from pyg_progcl import EdgeDrop, FeatureMask, GCNEncoder, GRACEModel, InfoNCELoss
from pyg_progcl.datasets import synthetic_graph
from pyg_progcl.diagnostics import diagnose, plot_similarity_histogram

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--dataset", default="Cora", help="a Planetoid name, read with --root")
parser.add_argument("--root", default=None, help="data root; without it, a synthetic graph")
parser.add_argument("--epochs", type=int, default=30)
parser.add_argument("--out", default="similarity.png", help="PNG of the histogram")
args = parser.parse_args()
torch.manual_seed(0)
name = args.dataset if args.root else "synthetic"
graph = Planetoid(args.root, args.dataset)[0] if args.root else synthetic_graph()
data = T.NormalizeFeatures()(graph)

model = GRACEModel(
    GCNEncoder(data.num_features, 128), 128, 128,
    augment1=[EdgeDrop(0.2), FeatureMask(0.3)], augment2=[EdgeDrop(0.4), FeatureMask(0.4)],
)  # fmt: skip
loss_fn = InfoNCELoss(tau=0.4)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5)
for _ in range(args.epochs):
    optimizer.zero_grad()
    loss = loss_fn(*model.views(data.x, data.edge_index))
    loss.backward()
    optimizer.step()
print(f"trained {args.epochs} epochs, final loss {loss.item():.4f}")

diag = diagnose(model, data, num_samples=20_000, seed=0)  # a labelled graph (data.y)
for key in ["fn_rate", "fn_share_topk", "fn_share_topk_lift", "fn_share_topk_hardness",
            "auc_similarity", "auc_posterior", "mean_cos_tn", "mean_cos_fn"]:  # fmt: skip
    print(f"{key:24s} {diag.summary[key]:.4f}")
print(f"fitted mixture: {diag.mixture}")
plot_similarity_histogram(diag, args.out, title=f"{name}, GRACE, {args.epochs} epochs")
print(f"histogram written to {args.out}")
