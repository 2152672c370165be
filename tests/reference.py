"""Independent dense references of the losses, written from the formulas of docs/algorithms.md.

Plain float64 formulas, no shifting, no blocks, Beta densities from torch.distributions:
nothing here is shared with the code under test.
"""

import math

import torch
import torch.nn.functional as F


def _cos(a, b):
    return F.normalize(a, dim=1) @ F.normalize(b, dim=1).T


def _off_diag(m):
    n = m.size(0)
    return m[~torch.eye(n, dtype=torch.bool)].view(n, n - 1)


def _directions(h1, h2):
    """(inter θ(a_i, o_k), intra θ(a_i, a_k)) for anchors u then v."""
    return [(_cos(h1, h2), _cos(h1, h1)), (_cos(h2, h1), _cos(h2, h2))]


def _reduce(h1, h2, tau, negatives):
    """J = 1/2N Σ_i [ℓ(u_i) + ℓ(v_i)] with ℓ = -log pos / (pos + Ng)."""
    total = 0.0
    for inter, intra in _directions(h1, h2):
        pos = torch.exp(inter.diagonal() / tau)
        ng = negatives(inter, intra, pos)
        total = total + (-torch.log(pos / (pos + ng))).sum()
    return total / (2 * h1.size(0))


def grace(h1, h2, tau):
    def ng(inter, intra, pos):
        return torch.exp(_off_diag(inter) / tau).sum(1) + torch.exp(_off_diag(intra) / tau).sum(1)

    return _reduce(h1, h2, tau, ng)


def grace_anchor(a, b, tau, i):
    """GRACE's loss of the single anchor a_i: positive b_i, negatives b_k and a_k (k != i)."""
    others = [k for k in range(a.size(0)) if k != i]
    pos = torch.exp(_cos(a[i : i + 1], b[i : i + 1])[0, 0] / tau)
    neg = torch.exp(_cos(a[i : i + 1], b[others]) / tau).sum()
    neg = neg + torch.exp(_cos(a[i : i + 1], a[others]) / tau).sum()
    return -torch.log(pos / (pos + neg))


def _debias(neg, pos, m, tau, tau_plus):
    floor = torch.full_like(neg, m * math.exp(-1 / tau))
    return torch.maximum((neg - tau_plus * m * pos) / (1 - tau_plus), floor)


def dcl(h1, h2, tau, tau_plus):
    def ng(inter, intra, pos):
        n = inter.size(0)
        neg = torch.exp(_off_diag(inter) / tau).sum(1) + torch.exp(_off_diag(intra) / tau).sum(1)
        return _debias(neg, pos, 2 * (n - 1), tau, tau_plus)

    return _reduce(h1, h2, tau, ng)


def hcl(h1, h2, tau, tau_plus, beta):
    def ng(inter, intra, pos):
        n = inter.size(0)
        theta = torch.cat([_off_diag(inter), _off_diag(intra)], dim=1)
        imp = torch.exp(beta * theta / tau)
        reweight = (imp * torch.exp(theta / tau)).sum(1) / imp.mean(1)
        return _debias(reweight, pos, 2 * (n - 1), tau, tau_plus)

    return _reduce(h1, h2, tau, ng)


def hardness(theta, alpha, beta, weight, eps=1e-4, floor=0.0):
    """b = max(p(true negative | s'), floor) · s' with s' = clamp((θ+1)/2) and
    torch.distributions.Beta."""
    s = ((theta + 1) / 2).clamp(eps, 1 - eps)
    dens = [
        weight[c] * torch.exp(torch.distributions.Beta(alpha[c], beta[c]).log_prob(s))
        for c in range(2)
    ]
    means = [alpha[c] / (alpha[c] + beta[c]) for c in range(2)]
    t = 0 if means[0] < means[1] else 1
    return ((dens[t] / (dens[0] + dens[1])).clamp(min=floor) * s).detach()


def progcl_weights(h1, h2, mixture_params):
    """Dense w_ik of anchors u_i (diagonal excluded), docs/algorithms.md §5.2."""
    inter = _cos(h1, h2)
    b = hardness(_off_diag(inter), *mixture_params)
    return b / b.mean(1, keepdim=True)


def _hardness_sources(h1, h2, fit_views, shared=False):
    """Per direction (anchors u, then v), the cosines ``b`` is computed from: those of the
    current views, or of the views ``(f1, f2)`` of the fit (the frozen schedule); with
    ``shared`` (the reference code) both directions use the first direction's matrix."""
    f1, f2 = (h1, h2) if fit_views is None else fit_views
    return iter([_cos(f1, f2), _cos(f1, f2) if shared else _cos(f2, f1)])


def progcl_weight(h1, h2, tau, mixture_params, fit_views=None, shared=False, floor=0.0):
    sources = _hardness_sources(h1, h2, fit_views, shared)

    def ng(inter, intra, pos):
        b = hardness(_off_diag(next(sources)), *mixture_params, floor=floor)
        w = b / b.mean(1, keepdim=True)
        terms = torch.exp(_off_diag(inter) / tau) + torch.exp(_off_diag(intra) / tau)
        return (w * terms).sum(1)

    return _reduce(h1, h2, tau, ng)


def progcl_mix_one(h1, h2, tau, mixture_params, eps=1e-8, fit_views=None, shared=False):
    """ProGCL-mix with K = 1: the hardest negative mixed with itself."""
    sources = _hardness_sources(h1, h2, fit_views, shared)

    def ng(inter, intra, pos):
        theta = _off_diag(inter)
        b = hardness(_off_diag(next(sources)), *mixture_params)
        k = b.argmax(1, keepdim=True)
        bk, tk = b.gather(1, k)[:, 0], theta.gather(1, k)[:, 0]
        mixed = (bk * tk + bk * tk) / (bk + bk + eps)
        base = torch.exp(theta / tau).sum(1) + torch.exp(_off_diag(intra) / tau).sum(1)
        return base + torch.exp(mixed / tau)

    return _reduce(h1, h2, tau, ng)


def progcl_mix(h1, h2, tau, mixture_params, k, pairing, eps=1e-8):
    """ProGCL-mix over the ``k`` negatives of largest ``b`` with a pairing that does not
    depend on their order: ``'self'`` (π = identity, each mixed with itself) or, for
    ``k = 2``, ``'swap'`` (π exchanges the two: both give the b-weighted mean); or given
    per anchor: a pair of ``[N, k]`` tensors (anchors ``u``, then ``v``) whose row ``i``
    is π over anchor ``i``'s hardest negatives in ascending node order."""
    perms = iter(pairing) if isinstance(pairing, tuple) else None

    def ng(inter, intra, pos):
        theta = _off_diag(inter)
        b = hardness(_off_diag(next(sources)), *mixture_params)
        top = b.topk(k, dim=1).indices.sort(dim=1).values
        bk, tk = b.gather(1, top), theta.gather(1, top)
        if perms is not None:
            pi = next(perms)
            mixed = (bk * tk + bk.gather(1, pi) * tk.gather(1, pi)) / (bk + bk.gather(1, pi) + eps)
        elif pairing == "self":
            mixed = (bk * tk + bk * tk) / (bk + bk + eps)
        else:
            assert pairing == "swap" and k == 2
            mean = (bk * tk).sum(1, keepdim=True) / (bk.sum(1, keepdim=True) + eps)
            mixed = mean.expand(-1, 2)
        base = torch.exp(theta / tau).sum(1) + torch.exp(_off_diag(intra) / tau).sum(1)
        return base + torch.exp(mixed / tau).sum(1)

    sources = _hardness_sources(h1, h2, None)
    return _reduce(h1, h2, tau, ng)


def beta_mixture_em(x, alpha, beta, weight, iters, eps=1e-4, min_variance=1e-6, min_weight=1e-6):
    """``iters`` EM iterations of a two-component Beta mixture with the weighted method of
    moments (ProGCL §5.1), one component at a time, in float64: ``(alpha, beta, weight)``."""
    x = x.double().clamp(eps, 1 - eps)
    a, b, w = ([float(v) for v in t] for t in (alpha, beta, weight))
    for _ in range(iters):
        beta_c = [torch.distributions.Beta(*x.new_tensor([a[c], b[c]])) for c in range(2)]
        dens = torch.stack([w[c] * beta_c[c].log_prob(x).exp() for c in range(2)])
        r = dens / dens.sum(0)
        mass = [float(r[c].sum()) for c in range(2)]
        for c in range(2):
            mean = min(max(float((r[c] * x).sum()) / mass[c], eps), 1 - eps)
            var = max(float((r[c] * x * x).sum()) / mass[c] - mean**2, min_variance)
            var = min(var, 0.999 * mean * (1 - mean))
            a[c] = mean * (mean * (1 - mean) / var - 1)
            b[c] = (1 - mean) * (mean * (1 - mean) / var - 1)
        w = [max(m / len(x), min_weight) for m in mass]
        w = [v / sum(w) for v in w]
    return a, b, w
