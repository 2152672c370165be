"""Mini-batch contrastive training on sampled subgraphs, for graphs too large for one step.

Each step encodes two augmented views of the subgraph sampled around ``--batch-size``
seed nodes (``neighbor_loader``: PyG's NeighborLoader, or a plain-torch sampler without
pyg-lib), and the loss is taken over the seeds (``minibatch_epoch``). ProGCL's mixture is
refitted once per epoch after the warm-up (``fit=True``). ``embed_minibatch`` then
computes every node's embedding layer by layer in batches: exact for GCNEncoder.

Run:  python examples/minibatch_large_graph.py --dataset Physics --root data  # PyG's Coauthor
      python examples/minibatch_large_graph.py   # a synthetic graph, seconds
ogbn-arxiv / ogbn-products (ogb's loaders, official split): ``python -m pyg_progcl train
--dataset ogbn-arxiv --batch-size 4096``.
"""

import argparse

import torch
import torch_geometric.transforms as T
from torch_geometric.datasets import Amazon, Coauthor

from pyg_progcl import EdgeDrop, FeatureMask, GCNEncoder, GRACEModel, ProGCLLoss
from pyg_progcl.datasets import synthetic_graph
from pyg_progcl.evaluation import evaluate
from pyg_progcl.minibatch import embed_minibatch, minibatch_epoch, neighbor_loader

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--dataset", default="Physics", choices=["Photo", "Computers", "CS", "Physics"])
parser.add_argument("--root", default=None, help="data root; without it, a synthetic graph")
parser.add_argument("--num-nodes", type=int, default=2000, help="size of the synthetic graph")
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--warmup", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=500, help=">= 256 (255 negatives)")
args = parser.parse_args()
torch.manual_seed(0)
if args.root:  # PyG's Amazon (Photo, Computers) or Coauthor (CS, Physics)
    dataset = Amazon if args.dataset in ("Photo", "Computers") else Coauthor
    data = dataset(args.root, args.dataset, transform=T.NormalizeFeatures())[0]
else:
    data = synthetic_graph(num_nodes=args.num_nodes)

model = GRACEModel(
    GCNEncoder(data.num_features, 128), 128, 128,
    augment1=[EdgeDrop(0.2), FeatureMask(0.3)], augment2=[EdgeDrop(0.4), FeatureMask(0.4)],
)  # fmt: skip
loss_fn = ProGCLLoss(tau=0.5, num_negatives=255)  # 255 of the other seeds per anchor
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5)
loader = neighbor_loader(data, num_neighbors=[10, 10], batch_size=args.batch_size)
print(f"{data.num_nodes} nodes, {len(loader)} batches per epoch ({type(loader).__name__})")

for epoch in range(1, args.epochs + 1):
    loss = minibatch_epoch(model, loss_fn, loader, optimizer, fit=epoch > args.warmup)
    print(f"epoch {epoch:3d}  loss {loss:.4f}  progcl fitted: {loss_fn.fitted}")

z = embed_minibatch(model, data, batch_size=4096)  # model(x, edge_index), batch by batch
if data.num_nodes <= 100_000:  # small enough to compare with one full-graph pass
    with torch.no_grad():
        full = model.eval()(data.x, data.edge_index)
    print(f"embed_minibatch vs full graph: max abs difference {(z - full).abs().max():.2e}")
print(f"linear probe test accuracy: {evaluate(z, data, 'gca')['accuracy']:.4f}")
