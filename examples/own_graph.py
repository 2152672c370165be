"""Your own graph: plain numpy arrays in, node embeddings out, a scikit-learn model on top.

Builds a graph from numpy arrays, trains ProGCL on it without labels in a plain loop, saves
the model and every node's embedding, and fits scikit-learn's LogisticRegression on them with
labels training never saw. The command line's version (train --data, embed): docs/own_graph.md.

Run:  python examples/own_graph.py [--nodes 1000] [--epochs 60] [--out DIR]
"""

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from pyg_progcl import EdgeDrop, FeatureMask, GCNEncoder, GRACEModel, ProGCLLoss
from pyg_progcl.io import embed, load_model, save_model

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--nodes", type=int, default=1000)
parser.add_argument("--epochs", type=int, default=60)
parser.add_argument("--out", type=Path, help="folder for model.pt and embeddings.npy")
args = parser.parse_args()

# 1. Plain arrays: 4 groups, 80 % of the edges within a group, features that hint at it.
rng = np.random.default_rng(0)
groups = rng.integers(0, 4, args.nodes)
src = rng.integers(0, args.nodes, 5 * args.nodes)
same = np.array([rng.choice(np.flatnonzero(groups == groups[s])) for s in src])
dst = np.where(rng.random(src.size) < 0.8, same, rng.integers(0, args.nodes, src.size))
features = rng.normal(size=(args.nodes, 32)).astype(np.float32)
features[:, :4] += 0.5 * np.eye(4, dtype=np.float32)[groups]

# 2. A PyG graph without labels (np.savez(..., edge_index=, x=) is the command line's file).
edge_index = to_undirected(torch.from_numpy(np.stack([src, dst])))
data = Data(x=torch.from_numpy(features), edge_index=edge_index)
print(f"graph: {data.num_nodes} nodes, {data.num_edges} edges, {data.num_features} features")

# 3. Train ProGCL-weight without labels in a plain loop, save the model and the embeddings.
torch.manual_seed(0)
aug1, aug2 = [EdgeDrop(0.2), FeatureMask(0.3)], [EdgeDrop(0.4), FeatureMask(0.4)]
model = GRACEModel(GCNEncoder(data.num_features, 64), 64, 64, augment1=aug1, augment2=aug2)
loss_fn = ProGCLLoss(tau=0.5, mode="weight")
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5)
for epoch in range(args.epochs):
    optimizer.zero_grad()
    h1, h2 = model.views(data.x, data.edge_index)
    if epoch >= args.epochs // 2:  # GRACE's loss for the first half, then ProGCL's
        loss_fn.fit(h1.detach(), h2.detach())
    loss = loss_fn(h1, h2)
    loss.backward()
    optimizer.step()
print(f"trained {args.epochs} epochs, final loss {loss.item():.4f}, fitted: {loss_fn.fitted}")
out = args.out or Path(tempfile.mkdtemp(prefix="own_graph-"))
out.mkdir(parents=True, exist_ok=True)
save_model(model, out / "model.pt")
np.save(out / "embeddings.npy", embed(model, data).numpy())
# 4. Later, elsewhere: the saved model embeds the same graph (or a new one) identically.
z = np.load(out / "embeddings.npy")
again = embed(load_model(out / "model.pt"), data, batch_size=500).numpy()
print(f"reloaded model, batched embedding: max abs difference {np.abs(z - again).max():.1e}")
# 5. Downstream: a scikit-learn classifier on the frozen embeddings.
z_train, z_test, y_train, y_test = train_test_split(z, groups, test_size=0.5, random_state=0)
classifier = LogisticRegression(max_iter=2000).fit(z_train, y_train)
print(f"logistic regression test accuracy: {classifier.score(z_test, y_test):.4f}")
