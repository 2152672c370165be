"""False-negative diagnostics: make ProGCL's evidence visible on your own graph.

ProGCL (Xia et al., "ProGCL: Rethinking Hard Negative Mining in Graph Contrastive
Learning", ICML 2022, https://arxiv.org/abs/2110.02027) argues that under message
passing the negatives most similar to an anchor are mostly *false* negatives (same
class), and that a two-component Beta mixture of the negative similarities separates
true from false negatives. This package measures that on any graph with labels:

.. code-block:: python

    from pyg_progcl.diagnostics import DiagnosticsTracker, diagnose, plot_similarity_histogram

    diag = diagnose(model, data)          # a GRACEModel (trained or not) and a labelled graph
    diag.summary["fn_share_topk"]         # false negatives among the 10 most similar negatives
    diag.summary["fn_rate"]               # ... the chance level to compare with
    diag.summary["auc_posterior"]         # ROC-AUC of p(true negative | s') (1 = perfect)
    plot_similarity_histogram(diag, "similarity.png")

    tracker = DiagnosticsTracker(data, every=10)   # a trainer callback: summaries over training

What to look for: ``fn_share_topk`` far above ``fn_rate`` means the hardest negatives
are mostly same-class nodes (message passing makes neighbours, and hence classmates,
similar); for the MLP control it stays nearer chance. High ``auc_*`` means similarity
tells true from false negatives; the mixture turns that ranking into probabilities and
ProGCL's hardness ``b = p(TN | s')·s'`` picks hard negatives with fewer false ones
(``fn_share_topk_hardness`` < ``fn_share_topk``).

Modules: :mod:`.core` (sampling, mixture fit, summary), :mod:`.tracker` (tracking over
training), :mod:`.plots` (matplotlib, optional). The GCN-vs-MLP control experiment and
``python -m pyg_progcl diagnose`` train models, so they live in the experiment harness
(:mod:`pyg_progcl.cli.control`, :mod:`pyg_progcl.cli.diagnose_cli`).
"""

from .core import (
    Diagnosis,
    NegativeSample,
    diagnose,
    false_negative_rate,
    fit_mixture,
    negative_similarity_sample,
    separation_auc,
    summarize,
    topk_false_negative_share,
)
from .plots import plot_comparison, plot_similarity_histogram, plot_tracking
from .tracker import DiagnosticsTracker

__all__ = [
    "Diagnosis",
    "DiagnosticsTracker",
    "diagnose",
    "false_negative_rate",
    "plot_similarity_histogram",
    "plot_tracking",
    "separation_auc",
    "topk_false_negative_share",
    "NegativeSample",
    "fit_mixture",
    "negative_similarity_sample",
    "summarize",
    "plot_comparison",
]
