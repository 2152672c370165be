"""Your own graph: plain numpy arrays in, node embeddings out, a scikit-learn model on top.

Builds a graph from numpy arrays (an edge list and a feature matrix), trains ProGCL on it
without labels, saves the model and every node's embedding, and fits scikit-learn's
LogisticRegression on the saved embeddings with labels it never saw in training:

    python examples/own_graph.py [--nodes 1000] [--epochs 60] [--out DIR]

The command-line version (train --data, embed) is in docs/own_graph.md.
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

from pyg_progcl import embed, load_model, save_model
from pyg_progcl.experiments import get_preset, train

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--nodes", type=int, default=1000)
parser.add_argument("--epochs", type=int, default=60)
parser.add_argument("--out", type=Path, help="folder for model.pt and embeddings.npy")
args = parser.parse_args()

# 1. Plain arrays: 4 groups, 80 % of the edges within a group, features that hint at it.
rng = np.random.default_rng(0)
groups = rng.integers(0, 4, args.nodes)
src = rng.integers(0, args.nodes, 5 * args.nodes)
members = [np.flatnonzero(groups == g) for g in range(4)]
same = np.array([rng.choice(members[groups[s]]) for s in src])
dst = np.where(rng.random(src.size) < 0.8, same, rng.integers(0, args.nodes, src.size))
features = rng.normal(size=(args.nodes, 32)).astype(np.float32)
features[:, :4] += 0.5 * np.eye(4, dtype=np.float32)[groups]

# 2. A PyG graph without labels (np.savez(..., edge_index=, x=) is the command line's file).
edge_index = to_undirected(torch.from_numpy(np.stack([src, dst])))
data = Data(x=torch.from_numpy(features), edge_index=edge_index)
print(f"graph: {data.num_nodes} nodes, {data.num_edges} edges, {data.num_features} features")

# 3. Train (ProGCL-weight; no labels, so no probe), save the model and the embeddings.
config = get_preset("file:own_graph", "progcl-weight", epochs=args.epochs, hidden=64, proj=64)
result, model = train(config, data, progress=False, return_model=True)
print(f"trained {args.epochs} epochs, final loss {result['final_loss'][0]:.4f}; probe "
      f"{result['probe']}")  # fmt: skip
out = args.out or Path(tempfile.mkdtemp(prefix="own_graph-"))
out.mkdir(parents=True, exist_ok=True)
save_model(model, out / "model.pt")
np.save(out / "embeddings.npy", embed(model, data).numpy())
print(f"saved {out / 'model.pt'} and {out / 'embeddings.npy'}")

# 4. Later, elsewhere: the saved model embeds the same graph (or a new one) identically.
z = np.load(out / "embeddings.npy")
again = embed(load_model(out / "model.pt"), data, batch_size=500).numpy()
print(f"reloaded model, batched embedding: max abs difference {np.abs(z - again).max():.1e}")

# 5. Downstream: a scikit-learn classifier on the frozen embeddings.
z_train, z_test, y_train, y_test = train_test_split(z, groups, test_size=0.5, random_state=0)
classifier = LogisticRegression(max_iter=2000).fit(z_train, y_train)
print(f"logistic regression test accuracy: {classifier.score(z_test, y_test):.4f}")
