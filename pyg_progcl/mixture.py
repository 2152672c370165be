"""Two-component Beta mixture of negative similarities (ProGCL, Xia et al., ICML 2022, §5.1)."""

from __future__ import annotations

import inspect
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ._checks import check_int, check_nonnegative, check_optional, check_positive, check_probability
from ._compat import is_compiling

__all__ = ["BetaMixture", "MixtureDegeneracyWarning"]


#: EM iterations between two host reads of its convergence (besides ``EARLY_CHECKS``).
CHECK_EVERY = 10
EARLY_CHECKS = (3, 6)


def beta_log_prob(x: Tensor, alpha: Tensor, beta: Tensor) -> Tensor:
    r"""``[n, c]`` log-densities of Beta distributions (``[c]`` parameters) at ``x`` in
    ``(0, 1)``:
    :math:`(\alpha-1)\log x + (\beta-1)\log(1-x) - \log B(\alpha,\beta)`."""
    x = x.unsqueeze(-1)
    log_norm = torch.lgamma(alpha) + torch.lgamma(beta) - torch.lgamma(alpha + beta)
    return (alpha - 1) * torch.log(x) + (beta - 1) * torch.log1p(-x) - log_norm


class MixtureDegeneracyWarning(UserWarning):
    """A fitted :class:`BetaMixture` no longer describes two groups of negative
    similarities (:meth:`BetaMixture.degeneracy`) where that puts a result at risk."""


#: What each kind of :attr:`BetaMixture.degenerate_fits` means.
DEGENERACY_KINDS = {
    "spike": "a false-negative spike at cosine 1",
    "not-unimodal": "a component that is not unimodal",
    "merged": "components that merged",
    "swapped": "components that swapped roles",
    "not-converged": "EM that did not converge",
}


class BetaMixture(torch.nn.Module):
    r"""Two-component Beta mixture fitted by EM with the weighted method of moments.

    From `ProGCL: Rethinking Hard Negative Mining in Graph Contrastive Learning`
    (Xia et al., ICML 2022): :math:`p(s) = \sum_c \lambda_c \mathrm{Beta}(s; \alpha_c, \beta_c)`.
    The component with the smaller mean :math:`\alpha/(\alpha+\beta)` models true negatives.

    ``alpha``, ``beta`` and ``weight`` are buffers of length 2. Every :meth:`fit`
    warm-starts from the current parameters.

    Args:
        alpha_init, beta_init: Initial :math:`\alpha`, :math:`\beta` of the two components
            (the reference code's).
        weight_init: Initial weight of the second (high-similarity) component.
        max_iter: Default EM iteration budget of :meth:`fit`.
        tol: EM stops when the mean log-likelihood changes by less than this.
        eps: Values are clamped to ``[eps, 1 - eps]`` (densities are infinite at the ends).
        min_variance: Floor of a component's variance (all-equal values stay finite).
        min_weight: Floor of a component's weight (a vanishing component stays usable).
        min_beta_high: Lower bound of :math:`\beta` of the high-similarity component
            (the reference code's 1.01; off by default: docs/algorithms.md §5.4).

    Attributes:
        problems_: What the last :meth:`fit`'s check found; empty for a healthy fit.
        degenerate_fits: How many fits since construction had a problem of each kind
            (:data:`DEGENERACY_KINDS`), ``{kind: count}``; a fit records them, no warning.
    """

    def __init__(
        self,
        alpha_init: tuple[float, float] = (1.0, 2.0),
        beta_init: tuple[float, float] = (2.0, 1.0),
        weight_init: float = 0.05,
        max_iter: int = 500,
        tol: float = 1e-7,
        eps: float = 1e-4,
        min_variance: float = 1e-6,
        min_weight: float = 1e-6,
        min_beta_high: float | None = None,
    ):
        super().__init__()
        for name, pair in (("alpha_init", alpha_init), ("beta_init", beta_init)):
            if len(pair) != 2:
                raise ValueError(f"`{name}` must be a pair of two numbers > 0 (got {pair!r})")
            for value in pair:
                check_positive(name, value)
        check_probability("weight_init", weight_init)
        self.alpha_init = tuple(float(a) for a in alpha_init)
        self.beta_init = tuple(float(b) for b in beta_init)
        self.weight_init = float(weight_init)
        self.max_iter = check_int("max_iter", max_iter, 1)
        self.tol = check_nonnegative("tol", tol)
        self.eps = check_positive("eps", eps)
        if self.eps >= 0.5:
            raise ValueError(f"`eps` must be in (0, 0.5) (got {eps})")
        self.min_variance = check_positive("min_variance", min_variance)
        self.min_weight = check_positive("min_weight", min_weight)
        self.min_beta_high = check_optional(check_positive, "min_beta_high", min_beta_high)
        self.register_buffer("alpha", torch.empty(2))
        self.register_buffer("beta", torch.empty(2))
        self.register_buffer("weight", torch.empty(2))
        self.register_buffer("num_fits", torch.zeros((), dtype=torch.long))
        # (EM's constant matrices, moved with the module)
        self.register_buffer("_em_constants", torch.tensor(_CONSTANTS), persistent=False)
        self.n_iter_ = 0
        self.problems_: list[str] = []
        self.degenerate_fits: dict[str, int] = {}
        self.reset_parameters()

    def reset_parameters(self):
        """Returns to the initial parameters (cold start)."""
        self.alpha.copy_(torch.tensor(self.alpha_init))
        self.beta.copy_(torch.tensor(self.beta_init))
        self.weight.copy_(torch.tensor([1.0 - self.weight_init, self.weight_init]))
        self.weight.clamp_(min=self.min_weight).div_(self.weight.sum())
        self.num_fits.zero_()
        self._fitted_key, self._fitted = None, False  # (fitted's host copy of num_fits > 0)

    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` has run since construction or the last reset."""
        return self._fitted if is_compiling() else self._host_fitted()  # (pointers do not trace)

    def _host_fitted(self) -> bool:
        """``num_fits > 0``, read on the host once per change of the buffer's storage or
        version and kept for compiled code, which reads the copy."""
        key = (self.num_fits.data_ptr(), self.num_fits._version)
        if key != self._fitted_key:
            self._fitted_key, self._fitted = key, bool(self.num_fits > 0)
        return self._fitted

    @property
    def means(self) -> Tensor:
        r"""Component means :math:`\alpha / (\alpha + \beta)`."""
        return self.alpha / (self.alpha + self.beta)

    @property
    def true_negative_index(self) -> int:
        """Index of the true-negative component (the one with the smaller mean)."""
        return int(torch.argmin(self.means))

    def _clamp(self, x: Tensor) -> Tensor:
        return x.clamp(self.eps, 1.0 - self.eps)

    def _joint_log_prob(self, x: Tensor) -> Tensor:
        """``[n, 2]`` log of weight times density, in the dtype of ``x``."""
        alpha, beta = self.alpha.to(x.dtype), self.beta.to(x.dtype)
        return torch.log(self.weight.to(x.dtype)) + beta_log_prob(self._clamp(x), alpha, beta)

    def log_prob(self, x: Tensor) -> Tensor:
        """Log-density of the mixture at ``x`` (clamped to ``[eps, 1 - eps]``)."""
        return torch.logsumexp(self._joint_log_prob(x), dim=-1)

    def posterior(self, x: Tensor) -> Tensor:
        """``[n, 2]`` responsibilities :math:`p(c \\mid x)` of the two components."""
        return torch.softmax(self._joint_log_prob(x), dim=-1)

    def log_odds_coefficients(self) -> tuple[float, float, float]:
        r"""``(a, b, c)`` with :math:`D(x) = a \log x + b \log(1-x) + c` (see below)."""
        return tuple(self._signed_coefficients(1.0).tolist())

    def log_odds_false_negative(self, x: Tensor, sign: float = 1.0) -> Tensor:
        r"""Elementwise :math:`D(x) = \log \frac{\lambda_F \mathrm{Beta}_F(x)}{\lambda_T \mathrm{Beta}_T(x)}`
        (times ``sign``), at ``x`` clamped to ``[eps, 1 - eps]``, an affine function of
        :math:`\log x` and :math:`\log(1-x)`;
        :math:`p(\mathrm{true\ neg.} \mid x) = \sigma(-D)`."""
        return self._log_odds(self._clamp(x), sign)

    def _signed_coefficients(self, sign: float) -> Tensor:
        """``sign · (a, b, c)`` of :meth:`log_odds_coefficients`, float64, on the device."""
        coef = self._log_coefficients()
        flip = 1 - 2 * torch.argmin(self.means)  # +1: component 0 is the true negatives'
        return (coef[:, 1] - coef[:, 0]) * (sign * flip)

    def _log_odds(self, x: Tensor, sign: float) -> Tensor:
        """``sign · D(x)`` of ``x`` already in ``[eps, 1 - eps]``, in ``x``'s dtype (half
        precision computed in float32)."""
        dtype = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
        a, b, c = self._signed_coefficients(sign).to(x.device, dtype)
        work = x.to(dtype)
        # (log(1 - x), not log1p(-x): faster, and exact to float32's order)
        d = torch.addcmul(c, torch.log(work), a)
        return d.addcmul_(torch.log(1.0 - work), b).to(x.dtype)

    def true_negative_posterior(self, x: Tensor) -> Tensor:
        """Posterior probability that each value of ``x`` (any shape) is a true negative."""
        return torch.sigmoid(self.log_odds_false_negative(x, sign=-1.0))

    def hardness_(self, s: Tensor, floor: float = 0.0) -> Tensor:
        r"""ProGCL's hardness :math:`b = s \, p(\mathrm{true\ neg.} \mid s)` of similarities
        :math:`s = (\theta + 1)/2`, in place (docs/algorithms.md §5.1); the posterior is
        floored at ``floor``."""
        s.clamp_(self.eps, 1.0 - self.eps)
        posterior = self._log_odds(s, -1.0).sigmoid_()
        return s.mul_(posterior.clamp_(min=floor) if floor > 0 else posterior)

    def log_hardness(self, s: Tensor, floor: float | Tensor = 0.0) -> Tensor:
        r""":math:`\log b = \log s + \log p(\mathrm{true\ neg.} \mid s)` as a new tensor,
        exact where :math:`b` underflows (``floor`` as in :meth:`hardness_`, or a tensor)."""
        dtype = s.dtype if s.dtype in (torch.float32, torch.float64) else torch.float32
        return self.log_hardness_(s.to(dtype, copy=True), floor)

    def log_hardness_(self, s: Tensor, floor: float | Tensor = 0.0) -> Tensor:
        """:meth:`log_hardness` of float32 or float64 ``s``, overwriting it (one new tensor)."""
        s = s.clamp_(self.eps, 1.0 - self.eps)
        a, b, c = self._signed_coefficients(1.0).to(s.device, s.dtype)
        log_s = torch.log(s)
        # D = c + a log s + b log(1 - s) in s; log p(TN | s) = log σ(-D) = -softplus(D)
        d = torch.addcmul(c, s.neg_().log1p_(), b, out=s).addcmul_(log_s, a)
        softplus = torch.logaddexp(d, d.new_zeros(()), out=d)
        if isinstance(floor, Tensor):
            softplus.clamp_(max=floor.log().neg())  # (0-dim: no promotion)
        elif floor > 0:
            softplus.clamp_(max=-math.log(floor))
        return log_s.sub_(softplus)

    @torch.no_grad()
    def fit(
        self,
        x: Tensor,
        max_iter: int | None = None,
        reduce: Callable[[Tensor], Tensor] | None = None,
    ) -> BetaMixture:
        """Runs EM on values in ``[0, 1]``, warm-started from the current parameters, until
        ``tol`` or ``max_iter``; records what :meth:`degeneracy` finds in ``problems_``.

        Args:
            x: 1-D tensor of values in ``[0, 1]`` (e.g. ``(cos + 1) / 2``).
            max_iter: Iteration budget of this call (default: the constructor's; only
                that budget records ``'not-converged'``).
            reduce: Sums the sufficient statistics over several samples (e.g. an
                all-reduce over ranks); the fit then equals one on their union.
        """
        x = self._check_values(x).double()
        budget = self.max_iter if max_iter is None else check_int("max_iter", max_iter, 1)
        x_range = torch.aminmax(x)  # (read with the result: the fit's one read at its end)
        em = _EM(self, self._clamp(x), reduce)
        checks = {c for c in (*EARLY_CHECKS, *range(CHECK_EVERY, budget, CHECK_EVERY))}
        checks = {c for c in checks if c < budget} | {budget}
        change, previous = None, None
        for n_iter in range(1, budget + 1):
            loglik = em.step(track=n_iter in checks or n_iter + 1 in checks)
            if n_iter in checks and n_iter > 1:
                change = em.change(loglik, previous)
                if n_iter < budget and em.converged(change.item()):
                    break
            previous = loglik
        if change is None:  # (one iteration: nothing to compare)
            change = torch.full((1,), math.nan, dtype=torch.float64, device=x.device)
        result = em.result()
        ranges = torch.stack([*x_range, *torch.aminmax(result)])
        state = torch.cat([change, ranges, em.start.view(-1), result.view(-1)])
        state = state.tolist()  # (the fit's one read at its end)
        change, low, high, least, most = state[:5]
        before, params = state[5:11], state[11:]
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError(
                "`x` must hold values in [0, 1] and contains NaN or inf values (the "
                "similarities of views that are not finite?)"
            )
        if low < 0 or high > 1:
            raise ValueError("`x` must hold values in [0, 1] (map cosines by (cos + 1) / 2)")
        # (read per component; listed from here on as alpha, beta and weight, each of 2)
        before, params = (sum((v[c::3] for c in range(3)), []) for v in (before, params))
        if not (least > 0 and math.isfinite(most)):
            # (statistics that were not finite: a bad sample, or a rank's `reduce`)
            raise ValueError(
                "BetaMixture.fit: EM gave parameters that are not finite and positive "
                f"({self._describe(params)}); the sufficient statistics were not finite "
                "(check `reduce` and the sample); the previous parameters are kept"
            )
        torch._foreach_copy_([self.alpha, self.beta, self.weight], list(result.T.unbind(0)))
        swapped_from = None
        if self.fitted:  # (the roles before: see degeneracy)
            means = [before[c] / (before[c] + before[2 + c]) for c in range(2)]
            swapped_from = int(means[0] > means[1])
        self.n_iter_ = n_iter
        self.num_fits += 1
        self._fitted_key, self._fitted = (self.num_fits.data_ptr(), self.num_fits._version), True
        converged = em.converged(change) or max_iter is not None
        self._record_problems(swapped_from, converged, params)
        return self

    def degeneracy(self, swapped_from: int | None = None) -> list[str]:
        """What is wrong with the fitted mixture as a model of true and false negatives
        (empty if nothing): a component not unimodal (a false-negative ``β < 1`` is a spike
        at cosine 1), components that merged, or (``swapped_from``: the true-negative
        index before a fit) that swapped roles (docs/algorithms.md §5.1)."""
        return [text for _, text in self._findings(swapped_from)]

    def _findings(self, swapped_from: int | None = None, params=None) -> list[tuple[str, str]]:
        """:meth:`degeneracy`'s ``(kind, text)`` pairs of ``params`` (six numbers: alpha,
        beta, weight; default: the buffers)."""
        if params is None:
            params = torch.cat([self.alpha, self.beta, self.weight]).tolist()
        a, b, w = params[0:2], params[2:4], params[4:6]
        means = [a[c] / (a[c] + b[c]) for c in range(2)]
        tn = 0 if means[0] <= means[1] else 1
        fn = 1 - tn
        found = []
        if b[fn] < 1:
            found.append(("spike", f"the false-negative component Beta({a[fn]:.3g}, "
                          f"{b[fn]:.3g}) has beta < 1: a spike at cosine 1 that classes "
                          "every near-duplicate negative as false"))  # fmt: skip
        for c, name in ((tn, "true"), (fn, "false")):
            if a[c] < 1 or (c == tn and b[c] < 1):
                found.append(("not-unimodal", f"the {name}-negative component Beta("
                              f"{a[c]:.3g}, {b[c]:.3g}) is not unimodal (alpha or beta < 1)"))  # fmt: skip
        if min(w) <= 1.01 * self.min_weight or abs(means[0] - means[1]) < 1e-3:
            found.append(("merged", f"the components merged (weights {w[0]:.3g}, {w[1]:.3g}; "
                          f"means {means[0]:.3g}, {means[1]:.3g})"))  # fmt: skip
        if swapped_from is not None and swapped_from != tn:
            found.append(
                ("swapped", "the components swapped roles (the true-negative one changed)")
            )
        return found

    def _record_problems(self, swapped_from: int | None, converged: bool, params=None) -> None:
        """Records the fit's problems in ``problems_`` and :attr:`degenerate_fits`."""
        found = self._findings(swapped_from, params)
        if not converged:
            found.append(
                ("not-converged", f"EM did not converge within {self.max_iter} iterations")
            )
        self.problems_ = [text for _, text in found]
        for kind in dict.fromkeys(kind for kind, _ in found):
            self.degenerate_fits[kind] = self.degenerate_fits.get(kind, 0) + 1

    def _log_coefficients(self) -> Tensor:
        """``[3, 2]`` coefficients of ``(log x, log(1-x), 1)`` in each joint log-density."""
        a, b, w = torch.stack([self.alpha, self.beta, self.weight]).double().unbind(0)
        log_norm = torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b)
        return torch.stack([a - 1, b - 1, torch.log(w) - log_norm])

    @staticmethod
    def _describe(params) -> str:
        a0, a1, b0, b1, w0, w1 = params.tolist() if isinstance(params, Tensor) else params
        return f"alpha [{a0:.3g}, {a1:.3g}], beta [{b0:.3g}, {b1:.3g}], weight [{w0:.3g}, {w1:.3g}]"

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        names = ("alpha", "beta", "weight")
        given = [state_dict.get(prefix + name) for name in names]
        if all(isinstance(t, Tensor) and t.shape == (2,) for t in given):
            params = torch.cat([t.detach().to("cpu", torch.float64) for t in given])
            if not bool((torch.isfinite(params) & (params > 0)).all()):
                raise ValueError(
                    "BetaMixture state: alpha, beta and weight must be finite and > 0 (got "
                    f"{self._describe(params)})"
                )
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if not is_compiling():  # (the host copy that compiled code reads as fitted)
            self._host_fitted()

    def _check_values(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() != 1 or x.numel() < 2:
            shape = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"`x` must be a 1-D tensor of at least 2 values (got {shape})")
        if x.is_complex():
            raise ValueError(
                f"`x` must hold real values in [0, 1] (got {x.dtype}); pass x.real if the "
                "imaginary parts are zero"
            )
        if x.layout != torch.strided:
            raise ValueError(f"`x` must be a dense tensor (got {x.layout}); pass x.to_dense()")
        if x.device.type == "meta":
            raise ValueError("`x` is a meta tensor, which holds no values: fit real similarities")
        return x  # (its range is read with the fit's result: fit)

    def extra_repr(self) -> str:
        a, b, w = (t.tolist() for t in (self.alpha, self.beta, self.weight))
        fmt = ", ".join
        defaults = inspect.signature(BetaMixture.__init__).parameters
        options = "".join(
            f", {name}={getattr(self, name)!r}"
            for name in ("max_iter", "tol", "eps", "min_variance", "min_weight", "min_beta_high")
            if getattr(self, name) != defaults[name].default
        )
        return (
            f"alpha=[{fmt(f'{v:.3g}' for v in a)}], beta=[{fmt(f'{v:.3g}' for v in b)}], "
            f"weight=[{fmt(f'{v:.3g}' for v in w)}], fitted={self.fitted}{options}"
        )


class _EM:
    """One fit's EM iterations on values ``x`` in ``[eps, 1 - eps]``, in float64 on their
    device, without a host read (docs/design.md). State: ``p`` (``[2, 3]``: α, β, α + β)
    and ``w`` (``[2, 1]``: the weights up to a common factor)."""

    def __init__(self, mixture: BetaMixture, x: Tensor, reduce: Callable | None):
        self.mixture, self.reduce = mixture, reduce or (lambda stats: stats)
        const = mixture._em_constants.to(x.device, x.dtype)
        self.to_pair, self.to_var, self.lgamma_sign, self.to_p = const.split([3, 1, 1, 3], 1)
        self.minus_one = self.lgamma_sign[:1]
        # (joint log-densities less the shared log x + log(1-x): one product with these rows)
        self.logs = F.pad(torch.stack([torch.log(x), torch.log1p(x.neg())]), (0, 0, 0, 1))
        self.moments = torch.stack([torch.ones_like(x), x, x * x], dim=1)  # (1, x, x²)
        # (summed over ranks: a device value)
        self.n = x.numel() if reduce is None else reduce(x.new_full((1,), x.numel()))
        self.limit = mixture.tol * self.n if reduce is None else mixture.tol
        self.start = torch.stack([mixture.alpha, mixture.beta, mixture.weight], 1).double()
        self.p, self.w = self.start @ self.to_p, self.start[:, 2:]

    def step(self, track: bool) -> Tensor | None:
        """One iteration; if ``track``, the log-likelihood (up to a constant) before it."""
        log_w = self.w.log()
        if track:  # (normalised weights)
            log_w = log_w.log_softmax(dim=0)
        bias = torch.addmm(log_w, self.p.lgamma(), self.lgamma_sign)  # (log λ - ln B)
        joint = torch.addmm(bias, self.p, self.logs)
        self.moments_step(self.reduce(joint.softmax(dim=0) @ self.moments))
        return self.reduce(joint.logsumexp(dim=0).sum(0, keepdim=True)) if track else None

    def moments_step(self, stats: Tensor) -> None:
        """Weighted method of moments from ``stats[c] = (Σ r_c, Σ r_c x, Σ r_c x²)``:
        ``α + β = m (1 - m) / v - 1``, ``v`` within ``[min_variance, m (1 - m))``; a
        component whose mass vanished keeps its α and β."""
        m = self.mixture
        mass = stats[:, :1]
        moments = stats / mass  # (1, m, E x²)
        pair = moments @ self.to_pair  # (m, 1 - m, 1)
        spread = pair.prod(dim=1, keepdim=True)
        var = torch.addmm(spread, moments, self.to_var).clamp_(min=m.min_variance)
        total = torch.addcdiv(self.minus_one, spread, var).clamp_(min=1 / 0.999 - 1)
        new = pair * total
        if m.min_beta_high is not None:  # (the high-mean component's, on the device)
            high = torch.arange(2, device=new.device) == 1 - torch.argmin(new[:, 0] / new[:, 2])
            beta = torch.where(high, new[:, 1].clamp(min=m.min_beta_high), new[:, 1])
            new = torch.stack([new[:, 0], beta, new[:, 0] + beta], dim=1)
        self.p = torch.where(mass > 1e-8 * self.n, new, self.p)
        self.w = mass.clamp(min=m.min_weight * self.n)  # (each weight at least min_weight)

    def change(self, loglik: Tensor, previous: Tensor) -> Tensor:
        """The change of the log-likelihood (of the mean one over ranks)."""
        return loglik - previous if isinstance(self.n, int) else (loglik - previous) / self.n

    def converged(self, change: float) -> bool:
        """Whether a change read on the host is below ``tol`` (per value)."""
        return abs(change) < self.limit

    def result(self) -> Tensor:
        """``[2, 3]``: each component's α, β and normalised weight."""
        return torch.cat([self.p[:, :2], self.w / self.w.sum()], dim=1)


#: :class:`_EM`'s constants, by columns: 0-2 map moments (1, m, E x²) to (m, 1 - m, 1);
#: 3 maps them to E x² - m; 4 holds the signs of lnΓ(α), lnΓ(β), lnΓ(α + β) in ln B(α, β)
#: (negated); 5-7 map a component's (α, β, λ) to (α, β, α + β).
_CONSTANTS = [
    [0.0, 1.0, 1.0, 0.0, -1.0, 1.0, 0.0, 1.0],
    [1.0, -1.0, 0.0, -1.0, -1.0, 0.0, 1.0, 1.0],
    [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0],
]
