"""Tests of pyg_progcl.diagnostics: false-negative analysis and plots.

Known answers come from graphs built here: a stochastic block model with strong
homophily and class-free random features (message passing makes same-class nodes
similar, an MLP cannot), and embeddings whose classes are orthogonal (a perfect
separator).
"""

from __future__ import annotations

import io
import json
import math

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import stochastic_blockmodel_graph

from pyg_progcl.augment import EdgeDrop, FeatureMask
from pyg_progcl.diagnostics import (
    NegativeSample,
    diagnose,
    false_negative_rate,
    fit_mixture,
    negative_similarity_sample,
    plot_comparison,
    plot_similarity_histogram,
    plot_tracking,
    separation_auc,
    summarize,
    topk_false_negative_share,
)
from pyg_progcl.diagnostics import core as diag_core
from pyg_progcl.encoders import GCNEncoder, MLPEncoder
from pyg_progcl.losses import InfoNCELoss, ProGCLLoss
from pyg_progcl.mixture import BetaMixture
from pyg_progcl.model import GRACEModel

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sbm() -> Data:
    """400 nodes, 4 classes, ~9 neighbours each, ~96% of edges inside a class;
    features are pure noise, so only the graph carries the class."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    prob = torch.full((4, 4), 0.002).fill_diagonal_(0.08)
    edge_index = stochastic_blockmodel_graph([100] * 4, prob)
    y = torch.arange(4).repeat_interleave(100)
    return Data(x=torch.randn(400, 32, generator=gen), edge_index=edge_index, y=y)


def make_model(encoder_cls, seed: int = 1) -> GRACEModel:
    torch.manual_seed(seed)
    return GRACEModel(
        encoder_cls(32, 32),
        32,
        32,
        augment1=[EdgeDrop(0.2), FeatureMask(0.2)],
        augment2=[EdgeDrop(0.3), FeatureMask(0.3)],
    )


def class_embeddings(labels: torch.Tensor, noise: float = 0.0, seed: int = 0) -> torch.Tensor:
    """One-hot class directions (plus noise): same class ⇒ cos ≈ 1, other class ⇒ cos ≈ 0."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.nn.functional.one_hot(labels, int(labels.max()) + 1).float()
    return z + noise * torch.randn(z.shape, generator=gen)


# ----------------------------------------------------------------------------- known answers


def test_message_passing_concentrates_false_negatives_mlp_does_not(sbm):
    """Random initialisation already shows it in the encoder output."""
    gcn = summarize(make_model(GCNEncoder), sbm, embeddings="encoder", num_samples=5000)
    mlp = summarize(make_model(MLPEncoder), sbm, embeddings="encoder", num_samples=5000)
    chance = gcn["fn_rate"]
    assert chance == pytest.approx((99 / 399), abs=1e-12)
    assert gcn["fn_share_topk"] > 1.8 * chance  # measured 0.69 vs 0.25 (0.52-0.76 over seeds)
    assert gcn["fn_share_topk"] > mlp["fn_share_topk"] + 0.25
    assert abs(mlp["fn_share_topk"] - chance) < 0.06  # features carry no class
    assert gcn["auc_similarity"] > 0.6 and abs(mlp["auc_similarity"] - 0.5) < 0.05
    assert gcn["mean_cos_fn"] > gcn["mean_cos_tn"]


def train_briefly(model: GRACEModel, data: Data, epochs: int = 20) -> GRACEModel:
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = InfoNCELoss(tau=0.5)
    model.train()
    for _ in range(epochs):
        optimizer.zero_grad()
        loss_fn(*model.views(data.x, data.edge_index)).backward()
        optimizer.step()
    return model


def test_a_plain_encoder_is_compared_with_itself(sbm):
    model = make_model(GCNEncoder)
    via_model = summarize(model, sbm, embeddings="encoder", num_samples=2000)
    assert summarize(model.encoder, sbm, num_samples=2000) == via_model
    z = model.encoder(sbm.x, sbm.edge_index)
    assert summarize(z, labels=sbm.y, num_samples=2000) == via_model


def test_after_a_few_epochs_the_loss_sees_false_negatives_as_hardest(sbm):
    """The default similarities: the projected, augmented views the loss sees."""
    gcn = summarize(train_briefly(make_model(GCNEncoder), sbm), sbm, num_samples=5000)
    mlp = summarize(train_briefly(make_model(MLPEncoder), sbm), sbm, num_samples=5000)
    assert gcn["fn_share_topk"] > 2 * gcn["fn_rate"]  # measured 0.85 vs 0.25
    assert gcn["fn_share_topk"] > mlp["fn_share_topk"] + 0.25
    assert abs(mlp["fn_share_topk"] - mlp["fn_rate"]) < 0.06
    assert gcn["auc_similarity"] > 0.65 and abs(mlp["auc_similarity"] - 0.5) < 0.05
    # The mixture's false-negative component sits at the higher similarities.
    assert gcn["mean_fn"] > gcn["mean_tn"]


def test_perfect_separator_has_auc_one_and_all_top_k_false():
    y = torch.arange(5).repeat_interleave(40)
    diag = diagnose(class_embeddings(y, noise=0.02), labels=y, num_samples=4000, top_k=5)
    s = diag.summary
    assert s["auc_similarity"] == 1.0
    assert s["auc_posterior"] > 0.99
    assert s["fn_share_topk"] == 1.0 and s["fn_share_topk_lift"] == pytest.approx(1 / s["fn_rate"])
    assert s["mean_cos_fn"] > 0.99 and abs(s["mean_cos_tn"]) < 0.05
    # The mixture finds the two groups: its FN weight is the sampled FN rate.
    assert s["weight_fn"] == pytest.approx(s["sample_fn_rate"], abs=0.02)
    assert s["flagged_fn_precision"] > 0.99 and s["flagged_fn_recall"] > 0.99


def test_auc_perfect_one_random_half_reversed_zero():
    gen = torch.Generator().manual_seed(0)
    is_tn = torch.rand(20_000, generator=gen) < 0.8
    scores = torch.where(is_tn, 1.0, 0.0) + 0.1 * torch.rand(20_000, generator=gen)
    assert separation_auc(scores, is_tn) == 1.0
    assert separation_auc(-scores, is_tn) == 0.0
    assert separation_auc(torch.rand(20_000, generator=gen), is_tn) == pytest.approx(0.5, abs=0.02)
    assert math.isnan(separation_auc(scores[:10], torch.ones(10, dtype=torch.bool)))


def test_posterior_auc_uses_the_posterior_not_the_similarity():
    """Same-class pairs in the middle, other-class pairs at both ends: similarity ranks at
    chance, the (non-monotone) posterior of the true mixture separates them."""
    torch.manual_seed(0)
    s_tn = torch.distributions.Beta(0.5, 0.7).sample((16_000,))
    s_fn = torch.distributions.Beta(30.0, 20.0).sample((4_000,))
    s = torch.cat([s_tn, s_fn]).clamp(1e-4, 1 - 1e-4)
    same = torch.cat([torch.zeros(16_000, dtype=torch.bool), torch.ones(4_000, dtype=torch.bool)])
    mixture = BetaMixture()
    mixture.alpha.copy_(torch.tensor([0.5, 30.0]))
    mixture.beta.copy_(torch.tensor([0.7, 20.0]))
    mixture.weight.copy_(torch.tensor([0.8, 0.2]))
    out = diag_core.sample_summary(NegativeSample(2 * s - 1, same), mixture)
    assert out["auc_posterior"] > out["auc_similarity"] + 0.2
    assert out["auc_posterior"] > 0.85


def test_random_embeddings_are_at_chance():
    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (300,), generator=gen)
    s = summarize(torch.randn(300, 16, generator=gen), labels=y, num_samples=20_000)
    assert abs(s["auc_similarity"] - 0.5) < 0.03
    assert abs(s["fn_share_topk"] - s["fn_rate"]) < 0.05
    assert s["sample_fn_rate"] == pytest.approx(s["fn_rate"], abs=0.01)


# ----------------------------------------------------------------------------- pieces


def test_summary_is_plain_json_floats(sbm):
    s = summarize(make_model(GCNEncoder), sbm, num_samples=2000, loss=ProGCLLoss())
    assert all(type(v) is float for v in s.values())
    assert json.loads(json.dumps(s)) == s
    sizes = (s["num_nodes"], s["num_classes"], s["num_samples"], s["top_k"])
    assert sizes == (400.0, 4.0, 2000.0, 10.0)
    assert s["fn_rate"] == pytest.approx(99 / 399, abs=1e-12)  # 4 classes of 100 nodes
    assert s["fn_share_topk_lift"] == pytest.approx(s["fn_share_topk"] / s["fn_rate"])
    for key in ("fn_share_topk", "fn_share_topk_hardness"):  # shares of 400 x 10 negatives
        assert s[key] * 4000 == pytest.approx(round(s[key] * 4000), abs=1e-6)
    assert s["sample_fn_rate"] * 2000 == pytest.approx(round(s["sample_fn_rate"] * 2000))
    assert s["mean_tn"] < s["mean_fn"]  # components named by their means
    assert s["weight_tn"] + s["weight_fn"] == pytest.approx(1.0)
    assert not any(k.startswith("loss_") for k in s)  # the loss's mixture is not fitted


def test_fitted_loss_mixture_is_reported(sbm):
    """The loss_* entries describe the loss's own mixture and weights at the sampled
    pairs (:func:`loss_summary`), next to the diagnosis's cold fit."""
    from pyg_progcl.diagnostics.core import loss_summary, mixture_summary

    model = make_model(GCNEncoder)
    loss = ProGCLLoss(num_samples=2000)
    loss.fit(*model.views(sbm.x, sbm.edge_index))
    d = diagnose(model, sbm, num_samples=2000, loss=loss)
    assert summarize(model, sbm, num_samples=2000, loss=loss) == d.summary
    expected = loss_summary(loss.mixture, loss.tau, d.sample)
    assert {k: d.summary[k] for k in expected} == pytest.approx(expected)
    assert expected["loss_alpha_tn"] == pytest.approx(
        float(loss.mixture.alpha[loss.mixture.true_negative_index])
    )
    assert {k: d.summary[k] for k in mixture_summary(d.mixture)} == mixture_summary(d.mixture)
    assert d.summary["alpha_tn"] != d.summary["loss_alpha_tn"]  # two different fits


def test_frozen_loss_is_diagnosed_with_the_weights_of_its_fit():
    """With schedule='frozen' the loss's weights come from the fit's views: the loss_*
    entries use those views' cosines at the sampled pairs, the masses the current ones."""
    from pyg_progcl.diagnostics.core import diagnose, loss_summary

    y = torch.arange(200) % 4
    h1, h2 = class_embeddings(y, 0.3, seed=1), class_embeddings(y, 0.3, seed=2)
    f1, f2 = torch.randn(200, 4), torch.randn(200, 4)  # fitted on unrelated views
    loss = ProGCLLoss(0.5, num_samples=2000, schedule="frozen").fit(f1, f2)
    d = diagnose((h1, h2), labels=y, num_samples=3000, loss=loss)
    i, k = d.sample.pairs
    assert torch.equal(d.sample.same_label, y[i] == y[k])
    u, v = torch.nn.functional.normalize(f1, dim=1), torch.nn.functional.normalize(f2, dim=1)
    frozen_cos = (u[i] * v[k]).sum(1)
    expected = loss_summary(loss.mixture, 0.5, d.sample, frozen_cos)
    for key in ("loss_fn_mass", "loss_flagged_fraction", "fn_mass", "loss_auc_posterior"):
        assert d.summary[key] == pytest.approx(expected[key])
    online = loss_summary(loss.mixture, 0.5, d.sample)  # the sample's own cosines
    assert abs(online["loss_auc_posterior"] - d.summary["loss_auc_posterior"]) > 0.1


def test_loss_summary_measures_what_the_weights_remove():
    """False negatives at cosine 0.9, true negatives at 0: a mixture that flags the high
    mode removes the false negatives' share of the weighted mass; a flat one does not."""
    from pyg_progcl.diagnostics.core import NegativeSample, loss_summary

    cos = torch.cat([torch.full((100,), 0.9), torch.zeros(900)])
    sample = NegativeSample(cos, torch.arange(1000) < 100)
    sharp = BetaMixture(alpha_init=(20.0, 60.0), beta_init=(20.0, 3.0), weight_init=0.1)
    sharp.num_fits += 1
    s = loss_summary(sharp, 0.5, sample)
    assert s["fn_mass"] == pytest.approx(
        100 * math.exp(-0.2) / (100 * math.exp(-0.2) + 900 * math.exp(-2))
    )
    assert s["loss_fn_mass"] < 0.01 < s["fn_mass"]
    assert s["loss_flagged_fraction"] == pytest.approx(0.1)
    assert s["loss_flagged_fn_precision"] == pytest.approx(1.0)
    flat = BetaMixture(alpha_init=(1.0, 1.0), beta_init=(1.0, 1.0))
    s = loss_summary(flat, 0.5, sample)  # p(TN) constant: b ∝ s' only
    expected = (
        100 * math.exp(-0.2) * 0.95 / (100 * math.exp(-0.2) * 0.95 + 900 * math.exp(-2) * 0.5)
    )
    assert s["loss_fn_mass"] == pytest.approx(expected)


def test_false_negative_rate_is_exact():
    y = torch.tensor([0, 0, 0, 1, 1, 2])
    assert false_negative_rate(y) == pytest.approx((3 * 2 + 2 * 1) / (6 * 5))


def test_sample_never_pairs_a_node_with_itself():
    """Orthogonal node embeddings: every off-diagonal cosine is 0, the diagonal 1."""
    z = torch.eye(50)
    y = torch.arange(50) % 2
    sample = negative_similarity_sample(z, labels=y, num_samples=10_000)
    assert sample.cos.shape == (10_000,) and sample.same_label.dtype == torch.bool
    assert sample.cos.abs().max() == 0.0
    assert sample.same_label.float().mean() == pytest.approx(24 / 49, abs=0.02)


def test_blocked_top_k_matches_a_dense_reference():
    gen = torch.Generator().manual_seed(3)
    y = torch.randint(0, 4, (120,), generator=gen)
    h1 = class_embeddings(y, noise=0.8, seed=1)
    h2 = class_embeddings(y, noise=0.8, seed=2)
    u, v = diag_core.embed((h1, h2))
    mixture = fit_mixture(NegativeSample(((u @ v.T).flatten()).clamp(-1, 1), y.new_zeros(1)))
    got = topk_false_negative_share(  # 18 row blocks of 7 anchors
        u, v, y, top_k=7, mixture=mixture, num_anchors=None, block_elements=7 * 120
    )
    # Dense reference: the full N×N matrix, self excluded by -inf.
    eye = torch.eye(120, dtype=torch.bool)
    same = (y[:, None] == y[None, :]).double()
    cos = (u @ v.T).masked_fill(eye, -math.inf)
    by_cos = same.gather(1, cos.topk(7, dim=1).indices).mean()
    # ProGCL's hardness b = s' p(true neg. | s'), s' = (θ + 1) / 2, in linear space.
    b = mixture.hardness_((u @ v.T).add(1.0).mul_(0.5)).masked_fill(eye, -math.inf)
    by_b = same.gather(1, b.topk(7, dim=1).indices).mean()
    assert got["fn_share_topk"] == pytest.approx(float(by_cos), abs=1e-9)
    assert got["fn_share_topk_hardness"] == pytest.approx(float(by_b), abs=1e-9)


def test_anchor_and_candidate_subsets_estimate_the_full_value():
    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 4, (600,), generator=gen)
    u, v = diag_core.embed(class_embeddings(y, noise=0.7))
    full = topk_false_negative_share(u, v, y, top_k=10, num_anchors=None)["fn_share_topk"]
    sub = topk_false_negative_share(u, v, y, top_k=10, num_anchors=200, num_candidates=300)
    assert sub["fn_share_topk"] == pytest.approx(full, abs=0.1)
    assert "fn_share_topk_hardness" not in sub


def test_diagnose_leaves_rng_and_modes_alone(sbm):
    model = make_model(GCNEncoder)
    model.train()
    model.augment1.eval()  # an unusual mix of modes must come back as it was
    modes = [m.training for m in model.modules()]
    state = torch.get_rng_state()
    a = summarize(model, sbm, num_samples=1000, seed=5)
    b = summarize(model, sbm, num_samples=1000, seed=5)
    assert torch.equal(torch.get_rng_state(), state)
    assert [m.training for m in model.modules()] == modes
    assert a == b  # fixed seed: the same augmentations and pairs


def test_labels_of_shape_n_by_one_are_accepted():
    y = torch.arange(4).repeat_interleave(10)
    s = summarize(class_embeddings(y), labels=y.view(-1, 1), num_samples=500, top_k=5)
    assert s["fn_share_topk"] == 1.0


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(labels=torch.zeros(39, dtype=torch.long)), "labels"),
        (dict(labels=torch.zeros(40, dtype=torch.long)), "at least 2 classes"),
        (dict(labels=torch.rand(40)), "integer"),
        (dict(labels=torch.arange(40) % 2, num_samples=0), "num_samples"),
        (dict(labels=torch.arange(40) % 2, top_k=0), "top_k"),
        (dict(labels=torch.arange(40) % 2, embeddings="raw"), "embeddings"),
        (dict(labels=torch.arange(40) % 2, num_anchors=1), "num_anchors"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        diagnose(torch.randn(40, 8), **kwargs)


def test_bad_sources_raise_value_error(sbm):
    with pytest.raises(ValueError, match="source"):
        diagnose("embeddings", labels=sbm.y)
    with pytest.raises(ValueError, match="data"):
        diagnose(make_model(GCNEncoder), labels=sbm.y)
    with pytest.raises(ValueError, match="labels"):
        diagnose(torch.randn(400, 8), Data(x=sbm.x))
    with pytest.raises(ValueError, match="same|one shape"):
        diagnose((torch.randn(40, 8), torch.randn(41, 8)), labels=torch.arange(40) % 2)
    with pytest.raises(ValueError, match="num_samples"):
        negative_similarity_sample(torch.randn(40, 8), labels=torch.arange(40) % 2, num_samples=0)


# ----------------------------------------------------------------------------- plots


@pytest.mark.slow  # matplotlib: renders three figures
def test_plots_write_non_empty_pngs(tmp_path, sbm):
    pytest.importorskip("matplotlib")
    diag = diagnose(make_model(GCNEncoder), sbm, num_samples=3000)
    paths = [tmp_path / "hist.png", tmp_path / "sub" / "grid.png", tmp_path / "track.png"]
    plot_similarity_histogram(diag, paths[0], title="GCN")
    plot_comparison({"a": diag, "b": diag, "c": diag}, paths[1])
    history = [{"epoch": float(e), **diag.summary} for e in (0, 5, 10)]
    plot_tracking({"GCN": history, "MLP": history}, paths[2])
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and 5_000 < len(data) < 200_000
    plot_similarity_histogram(diag.sample)  # a bare sample: cold fit, no file
    with pytest.raises(ValueError, match="history"):
        plot_tracking([])


def _bars(ax) -> int:
    """Bars of non-zero height in ``ax``."""
    return sum(1 for patch in ax.patches if patch.get_height() > 0)


@pytest.mark.slow  # matplotlib: renders four figures
@pytest.mark.filterwarnings("ignore::pyg_progcl.mixture.MixtureDegeneracyWarning")
def test_figures_a_reader_understands_without_the_code(sbm):
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_rgb

    from pyg_progcl.diagnostics.plots import TRACKED

    g = torch.Generator().manual_seed(0)
    same = torch.rand(2000, generator=g) < 0.2
    # An untrained encoder: every cosine within 1e-4 of 1 (shown as 1.000): the panel
    # zooms in and says so, instead of one bar at the right edge of an empty axis.
    narrow = NegativeSample(1 - 2e-4 * torch.rand(2000, generator=g), same)
    ax = plot_similarity_histogram(narrow).axes[0]
    assert _bars(ax) >= 20
    lo, hi = ax.get_xlim()
    assert lo <= float(narrow.scaled.min()) and hi >= float(narrow.scaled.max()) and hi - lo < 1e-3
    assert any("zoomed" in t.get_text() for t in ax.texts)
    # Similarities that coincide: a labelled note, no bars.
    ax = plot_similarity_histogram(NegativeSample(torch.ones(500), same[:500])).axes[0]
    assert _bars(ax) == 0
    assert any("all 500 negative pairs at s' = 1.000000" in t.get_text() for t in ax.texts)

    diag = diagnose(make_model(GCNEncoder), sbm, num_samples=3000)
    history = [{"epoch": float(e), **diag.summary, "loss_auc_posterior": 0.6} for e in (0, 5)]
    figures = [
        plot_comparison({"GCN": diag, "MLP": diag}, suptitle="SBM"),
        plot_tracking({"GCN": history, "MLP": history}, title="SBM: over training"),
    ]
    assert figures[1].get_suptitle() == "SBM: over training"
    for fig in figures:
        fig.savefig(io.BytesIO(), format="png")  # (lays the figure out)
        # One legend, below the panels: off every panel's data.
        assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
        box = fig.legends[0].get_window_extent()
        assert not any(box.overlaps(ax.get_window_extent()) for ax in fig.axes)
        assert all(ax.get_title() for ax in fig.axes)
    # The curves of one panel in colours that differ (not two greens).
    for panel in (("fn_",), ("auc", "loss_auc")):
        colours = [to_rgb(c) for k, (_, c, _) in TRACKED.items() if k.startswith(panel)]
        for i, a in enumerate(colours):
            for b in colours[i + 1 :]:
                assert sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5 > 0.3, (a, b)


def test_missing_matplotlib_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    y = torch.arange(20) % 2
    sample = negative_similarity_sample(torch.randn(20, 4), labels=y, num_samples=100)
    with pytest.raises(ImportError, match=r"pyg_progcl\[plot\]"):
        plot_similarity_histogram(sample)


# ----------------------------------------------------------------------------- training, CLI


SMALL = ["--dataset", "synthetic", "--hidden", "16", "--proj", "16", "--probe-epochs", "20"]
DIAGNOSE_TRAINING = ["diagnose", *SMALL, "--epochs", "2", "--every", "1", "--warmup-epochs", "1"]
RUNS = {
    "GCN, initial",
    "GCN, 2 epochs progcl-weight",
    "MLP, initial",
    "MLP, 2 epochs progcl-weight",
}
