"""False-negative diagnostics (ProGCL, Xia et al., ICML 2022,
https://arxiv.org/abs/2110.02027): are an anchor's most similar negatives mostly of its
class, and does a Beta mixture of the similarities tell them apart? On any labelled graph:

.. code-block:: python

    from pyg_progcl.diagnostics import DiagnosticsTracker, diagnose, plot_similarity_histogram

    diag = diagnose(model, data)          # a GRACEModel (trained or not) and a labelled graph
    diag.summary["fn_share_topk"]         # false negatives among the 10 most similar negatives
    diag.summary["fn_rate"]               # ... the chance level to compare with
    diag.summary["auc_posterior"]         # ROC-AUC of p(true negative | s') (1 = perfect)
    plot_similarity_histogram(diag, "similarity.png")

    tracker = DiagnosticsTracker(data, every=10)   # a trainer callback: summaries over training

``fn_share_topk`` far above ``fn_rate``: the hardest negatives are mostly classmates;
``fn_share_topk_hardness`` below ``fn_share_topk``: ProGCL's hardness avoids them.
Modules: :mod:`.core`, :mod:`.tracker`, :mod:`.plots` (matplotlib, optional).
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
