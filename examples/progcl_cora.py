"""ProGCL on Cora in a plain PyG training loop, then a linear probe.

GRACE's loss for the warm-up epochs (an unfitted ProGCLLoss *is* InfoNCE), then
``loss_fn.fit(h1.detach(), h2.detach())`` at every later epoch, before the loss: the Beta
mixture is refitted on that epoch's views and the negatives are weighted by their
hardness. The probe is pyg_progcl.evaluation.evaluate with the GCA protocol: a
logistic-regression layer (Adam) on the frozen encoder embeddings ``model(x, edge_index)``,
random 10% / 10% / 80% train / validation / test split.

Run:  python examples/progcl_cora.py --root data  # PyG's Planetoid: data/Cora, or downloads it
      python examples/progcl_cora.py --epochs 40 --warmup 20  # no --root: a synthetic graph
"""

import argparse

import torch
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid

from pyg_progcl import EdgeDrop, FeatureMask, GCNEncoder, GRACEModel, ProGCLLoss
from pyg_progcl.datasets import synthetic_graph
from pyg_progcl.evaluation import evaluate

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--root", default=None, help="data root of PyG's Planetoid (ROOT/Cora)")
parser.add_argument("--dataset", choices=["Cora", "synthetic"], help="default: Cora with --root")
parser.add_argument("--epochs", type=int, default=200)
parser.add_argument("--warmup", type=int, default=100, help="epochs with GRACE's loss")
parser.add_argument("--probe-epochs", type=int, default=3000)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
torch.manual_seed(args.seed)

root = args.root or "data"
if (args.dataset or ("Cora" if args.root else "synthetic")) == "Cora":
    try:  # ROOT/Cora, else PyG downloads it there; features row-normalised
        data = Planetoid(root, "Cora", transform=T.NormalizeFeatures())[0]
    except OSError as exc:  # the download failed (offline)
        parser.exit(2, f"progcl_cora.py: error: no Cora under {root}: {exc}\n")
else:
    data = T.NormalizeFeatures()(synthetic_graph(seed=args.seed))
print(data)

# The ProGCL paper's Cora setting (GRACE's augmentations and model sizes, tau = 0.4).
model = GRACEModel(
    GCNEncoder(data.num_features, 128), hidden_channels=128, proj_channels=128,
    augment1=[EdgeDrop(0.2), FeatureMask(0.3)], augment2=[EdgeDrop(0.4), FeatureMask(0.4)],
)  # fmt: skip
loss_fn = ProGCLLoss(tau=0.4, mode="weight")  # or mode="mix"
optimizer = torch.optim.Adam(model.parameters(), lr=5e-4, weight_decay=1e-5)

for epoch in range(1, args.epochs + 1):
    model.train()
    optimizer.zero_grad()
    h1, h2 = model.views(data.x, data.edge_index)
    if epoch > args.warmup:  # refit the mixture on this epoch's views, then weight
        loss_fn.fit(h1.detach(), h2.detach())
    loss = loss_fn(h1, h2)
    loss.backward()
    optimizer.step()
    if epoch == 1 or epoch % 10 == 0 or epoch == args.epochs:
        print(f"epoch {epoch:4d}  loss {loss.item():.4f}  progcl fitted: {loss_fn.fitted}")

model.eval()
with torch.no_grad():
    z = model(data.x, data.edge_index)
result = evaluate(z, data, protocol="gca", seed=args.seed, probe_epochs=args.probe_epochs)
print(f"mixture: {loss_fn.mixture}")
print(f"linear probe test accuracy: {result['accuracy']:.4f}")
