"""A hostile tester's inputs at the library's boundary: each ends in one clear line (a
``ValueError`` naming the argument and the fix) or in a correct result, never in a long
traceback from inside torch or a silent NaN."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import REPO
from helpers import small_graph
from torch_geometric.nn.models import GCN

from pyg_progcl import (
    BetaMixture,
    DebiasedInfoNCELoss,
    GCNEncoder,
    GRACEModel,
    HardInfoNCELoss,
    InfoNCELoss,
    MLPEncoder,
    ProGCLLoss,
)
from pyg_progcl.losses.schedules import FrozenFit

LOSSES = [InfoNCELoss, DebiasedInfoNCELoss, HardInfoNCELoss, ProGCLLoss]


def one_line(excinfo) -> str:
    """The exception's message, checked to be one line."""
    message = str(excinfo.value)
    assert "\n" not in message, message
    return message


def views(n=40, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    h1 = torch.randn(n, d, generator=g)
    return h1, h1 + 0.5 * torch.randn(n, d, generator=g)


def ring(n=12):
    arange = torch.arange(n)
    one_way = torch.stack([arange, (arange + 1) % n])
    return torch.cat([one_way, one_way.flip(0)], dim=1)


# 1. Sparse views: torch's "Could not run 'aten::ne.Scalar' ... SparseCPU" (93 lines)
# from the finiteness check, or "unsupported tensor layout: SparseCsr".
@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("loss_cls", LOSSES)
def test_sparse_views_are_refused_in_one_line(loss_cls, layout):
    h1, h2 = views()
    sparse = h1.to_sparse() if layout == "coo" else h1.to_sparse_csr()
    loss_fn = loss_cls()
    for call in (lambda: loss_fn(sparse, h2), lambda: loss_fn(h1, sparse.t())):
        with pytest.raises(ValueError, match=r"must be a dense tensor.*\.to_dense\(\)"):
            call()
    if isinstance(loss_fn, ProGCLLoss):
        with pytest.raises(ValueError, match=r"`h1` must be a dense tensor") as err:
            loss_fn.fit(sparse, h2)
        one_line(err)


# 2. A complex sample: torch's '"ge_cpu" not implemented for 'ComplexFloat''.
def test_complex_values_to_the_mixture_fit_are_refused_in_one_line():
    x = torch.rand(100, dtype=torch.complex64)
    with pytest.raises(ValueError, match=r"`x` must hold real values.*complex64.*x\.real") as err:
        BetaMixture().fit(x)
    one_line(err)
    with pytest.raises(ValueError, match=r"`x` must be a dense tensor.*to_dense"):
        BetaMixture().fit(torch.rand(100).to_sparse())
    assert BetaMixture().fit(x.real).fitted  # the real part is a valid sample


# 3. uint8 node ids: "index -1 is out of bounds for dimension 0 with size 2" from PyG;
# int16 reached the adaptive augmenters' indexing ("tensors used as indices must be long").
def test_narrow_integer_edge_index_is_refused_and_int32_accepted():
    x, edge_index = torch.randn(12, 6), ring()
    encoder = GCNEncoder(6, 4)
    for dtype, hint in [
        (torch.uint8, "up to 255"),
        (torch.int8, "up to 127"),
        (torch.int16, "up to 32767"),
    ]:
        with pytest.raises(ValueError, match=rf"`edge_index` must be an int64 or int32.*{hint}"):
            encoder(x, edge_index.to(dtype))
        with pytest.raises(ValueError, match=r"edge_index\.long\(\)") as err:
            GRACEModel(GCNEncoder(6, 4), 4, 4).views(x, edge_index.to(dtype))
        one_line(err)
    with pytest.raises(ValueError, match=r"int64 or int32 tensor \(got torch.bool: a mask"):
        encoder(x, edge_index.bool())
    # int32 is an index type of torch and PyG: the same embeddings as int64.
    torch.testing.assert_close(encoder(x, edge_index.int()), encoder(x, edge_index))


# 4. float64 / half features to a float32 model: "expected m1 and m2 to have the same
# dtype, but got: double != float". They are cast to the parameters' type.
def test_features_of_another_float_type_are_cast_to_the_parameters():
    torch.manual_seed(0)
    x, edge_index = torch.randn(12, 6), ring()
    weight = torch.rand(edge_index.size(1))
    gcn, mlp = GCNEncoder(6, 4), MLPEncoder(6, 4)
    model = GRACEModel(GCNEncoder(6, 4), 4, 4)
    pyg_model = GRACEModel(GCN(6, 4, num_layers=2), 4, 4)  # an encoder without its own cast
    for module, args in [
        (gcn, (edge_index,)),
        (gcn, (edge_index, weight)),
        (mlp, ()),
        (model, (edge_index,)),
        (pyg_model, (edge_index,)),
    ]:
        expected = module(x, *args)
        out = module(x.double(), *args)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, expected)  # float64 -> float32 is exact here
        out = module(x.half(), *args)  # a half-precision cast of x, computed in float32
        torch.testing.assert_close(out, module(x.half().float(), *args))
    # Edge weights too (float64 weights with float32 features).
    torch.testing.assert_close(gcn(x, edge_index, weight.double()), gcn(x, edge_index, weight))
    h1, h2 = model.views(x.double(), edge_index)
    assert h1.dtype == h2.dtype == torch.float32
    # A float64 model takes float32 features the same way.
    double = GRACEModel(GCNEncoder(6, 4), 4, 4).double()
    assert double(x, edge_index).dtype == torch.float64
    # Under autocast, float64 features join the half-precision computation too.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.isfinite(model(x.double(), edge_index)).all()
        assert torch.isfinite(mlp(x.double())).all()


# 5. Features of the wrong width to a bare encoder: "mat1 and mat2 shapes cannot be
# multiplied (10x7 and 6x8)".
@pytest.mark.parametrize("encoder_cls", [GCNEncoder, MLPEncoder])
def test_bare_encoders_refuse_a_wrong_width_naming_both(encoder_cls):
    encoder = encoder_cls(6, 4)
    with pytest.raises(
        ValueError, match=r"`x` must have shape \[num_nodes, 6\].*in_channels = 6.*got 7 features"
    ) as err:
        encoder(torch.randn(12, 7), ring())
    one_line(err)
    with pytest.raises(ValueError, match=r"in_channels = 6"):
        encoder(torch.randn(12, 7), ring(), check=False)  # cheap: checked without check too


# 6. Absurd temperatures: ProGCL's fit at tau=1e100 ("value cannot be converted to type
# float without overflow"), every loss at tau=1e-39 (the same), an infinite loss at
# tau=1e-38; HCL's beta=1e30 with tau=1e-20 gave NaN gradients.
def test_temperatures_outside_the_float32_range_are_refused_at_construction():
    for loss_cls in LOSSES:
        for tau in (1e100, 1e21, 1e-21, 1e-30, 1e-39):
            with pytest.raises(ValueError, match=r"`tau` must lie in \[1e-20, 1e\+20\]") as err:
                loss_cls(tau=tau)
            one_line(err)
    with pytest.raises(ValueError, match=r"`beta` must be at most 1e\+30·tau - 1"):
        HardInfoNCELoss(tau=0.5, beta=1e300)
    with pytest.raises(ValueError, match=r"`mix_eps` must lie in \[1e-30, 1\]"):
        ProGCLLoss(mode="mix", mix_eps=1e300)  # (was a NaN loss)
    # The ends of the range give finite losses and gradients on every loss.
    h1, h2 = views(n=64, d=16)
    for loss_cls in LOSSES:
        for tau in (1e-20, 1e20):
            loss_fn = loss_cls(tau=tau)
            a, b = h1.clone().requires_grad_(), h2.clone().requires_grad_()
            if isinstance(loss_fn, ProGCLLoss):
                loss_fn.fit(h1, h2, generator=torch.Generator().manual_seed(0))
            loss = loss_fn(a, b)
            loss.backward()
            assert torch.isfinite(loss) and torch.isfinite(a.grad).all(), (loss_cls, tau)
            if tau == 1e20:  # every logit is 0: log(2N - 1)
                torch.testing.assert_close(loss.item(), torch.tensor(127.0).log().item())


# 7. ProGCLLoss(mixture='x') was accepted and failed at the first fit ("'str' object has
# no attribute 'degenerate_fits'"); mode=[1]: "unhashable type: 'list'".
def test_progcl_constructor_arguments_are_type_checked():
    cases = [
        (dict(mixture="x"), r"`mixture` must be a pyg_progcl.BetaMixture or None"),
        (dict(mixture=FrozenFit()), r"`mixture` must be a pyg_progcl.BetaMixture"),
        (dict(schedule=FrozenFit), r"`schedule` must be one of .* or a FitSchedule.*FrozenFit\(\)"),
        (dict(schedule=[1]), r"`schedule` must be one of"),
        (dict(schedule=BetaMixture()), r"`schedule` must be one of"),
        (dict(mode=[1]), r"`mode` must be one of \['mix', 'weight'\]"),
        (dict(mode=None), r"`mode` must be one of"),
        (dict(reduction={}), r"`reduction` must be one of"),
        (dict(num_mix="a"), r"`num_mix` must be an integer"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message) as err:
            ProGCLLoss(**kwargs)
        one_line(err)
    assert isinstance(ProGCLLoss(mixture=BetaMixture(min_beta_high=1.01)).mixture, BetaMixture)


def test_huge_labels_in_a_graph_file_are_refused_when_it_is_read(tmp_path):
    import numpy as np

    from pyg_progcl.io import read_graph

    data = small_graph()
    arrays = {"x": data.x.numpy(), "edge_index": data.edge_index.numpy()}
    np.savez(tmp_path / "g.npz", y=np.full(data.num_nodes, 2**62), **arrays)
    with pytest.raises(ValueError, match=r"`y` has class id .*torch.unique") as err:
        read_graph(tmp_path / "g.npz")
    one_line(err)


@pytest.mark.parametrize("model", ["gcn", "mlp", "grace", "views"])
def test_float64_features_beyond_float32_are_refused_not_embedded_as_inf(model):
    x = torch.randn(10, 4, dtype=torch.float64)
    x[0, 0] = 1e300  # finite in float64, inf in the float32 parameters' type
    edge_index = torch.tensor([[0, 1], [1, 2]])
    call = {
        "gcn": lambda: GCNEncoder(4, 8)(x, edge_index),
        "mlp": lambda: MLPEncoder(4, 8)(x, edge_index),
        "grace": lambda: GRACEModel(GCNEncoder(4, 8), 8, 8)(x, edge_index),
        "views": lambda: GRACEModel(GCNEncoder(4, 8), 8, 8).views(x, edge_index),
    }[model]
    with pytest.raises(ValueError, match="NaN or infinite") as err:
        call()
    one_line(err)


# 9. num_samples: the independent pairs of a small graph were gathered as two [M, d]
# matrices at once (1.6 kB per sample at d = 128: 160 GB for the accepted 10^8).
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux /proc only")
def test_the_fit_sample_memory_does_not_grow_with_the_views_width():
    # 20 nodes (independent pairs), d = 8192, M = 8192: the old gather peaked at 3 x 268 MB.
    script = textwrap.dedent(
        """
        import torch
        from pyg_progcl.losses._sampling import sample_negative_similarities

        def vm(key):
            for line in open("/proc/self/status"):
                if line.startswith(key):
                    return int(line.split()[1]) * 1024

        g = torch.Generator().manual_seed(0)
        h1, h2 = torch.randn(20, 8192, generator=g), torch.randn(20, 8192, generator=g)
        sample_negative_similarities(h1, h2, 100)  # warm-up
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # resets VmHWM to the current RSS
        base = vm("VmRSS")
        theta = sample_negative_similarities(h1, h2, 8192, torch.Generator().manual_seed(1))
        assert theta.shape == (8192,) and bool((theta.abs() <= 1).all())
        print(vm("VmHWM") - base)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    peak = int(out.stdout.split()[-1])
    assert peak < 128 * 2**20, f"peak {peak / 2**20:.0f} MiB for 8192 samples"
