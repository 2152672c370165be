"""The trainer's model building (pyg_progcl.cli.build) around pyg_progcl.model."""

import torch


def _bag_of_words(num_nodes=50, num_features=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(num_nodes, num_features, generator=g) < 0.05
    return torch.rand(num_nodes, num_features, generator=g) * mask


def test_build_model_recomputes_views_only_for_large_dense_view_features(monkeypatch):
    import pyg_progcl.cli.build as build
    from pyg_progcl.cli.presets import get_preset

    monkeypatch.setattr(build, "RECOMPUTE_FEATURES", 1000)  # 50 × 40 = 2000 entries
    config = get_preset("synthetic", "grace")
    sparse_x, dense_x = _bag_of_words(), torch.rand(50, 40)
    assert build.build_model(config, 40, 50).recompute_views  # sizes only: dense
    assert build.build_model(config, 40, 50, dense_x).recompute_views
    assert not build.build_model(config, 40, 50, sparse_x).recompute_views  # ~100 non-zeros
    mlp = config.replace(encoder="mlp")
    assert not build.build_model(mlp, 40, 50, sparse_x).recompute_views
