"""ProGCL-mix's selection of the hardest negatives (``largest``) against a sorted
reference: the ``k`` largest entries of each row in ascending columns, ties at the
``k``-th value from the lowest columns (docs/algorithms.md §5.3)."""

import pytest
import torch

from pyg_progcl.losses._hardness import largest, select_hardest


def sorted_reference(x: torch.Tensor, k: int) -> list[list[int]]:
    """Per row, the columns of the ``k`` largest entries by a stable sort on
    ``(-value, column)``, then in ascending order (plain Python floats)."""
    rows = []
    for row in x.tolist():
        order = sorted(range(len(row)), key=lambda c: (-row[c], c))[:k]
        rows.append(sorted(order))
    return rows


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_the_k_largest_in_ascending_columns(dtype):
    x = torch.randperm(7 * 36).view(7, 36).to(dtype)  # distinct (< 256: exact in bfloat16)
    x[:, 3] = float("-inf")  # an excluded entry
    for k in (1, 13, 35):
        assert largest(x, k).tolist() == sorted_reference(x, k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_ties_at_the_kth_value_go_to_the_lowest_columns(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 6, (41, 30), generator=g).to(dtype)  # many ties at the k-th value
    x[0] = torch.arange(30, dtype=dtype)  # a row without ties beside the tied ones
    for k in (1, 9, 29):
        got = largest(x, k)
        assert got.dtype == torch.int64 and got.shape == (41, k)
        assert got.tolist() == sorted_reference(x, k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zeros_subnormals_and_infinity(dtype):
    # The hardness b of a block: zeros (the anchor's own entry, underflowed b, of either
    # sign), subnormals, ties and an overflowed entry.
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 5, (30, 40), generator=g).to(dtype) * torch.rand(40, generator=g).to(dtype)
    x[:, :4] = 0.0
    x[::2, 2] = -0.0  # equal to +0: a tie, taken by column
    x[::3, 5] = torch.finfo(dtype).tiny / 4  # subnormal
    x[::4, 7] = torch.finfo(dtype).tiny / 8  # a smaller subnormal
    x[1, 6] = float("inf")
    for k in (1, 7, 36, 39):
        assert largest(x, k).tolist() == sorted_reference(x, k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_small_cases_by_hand(dtype):
    x = torch.tensor([[0.0, 2, 1, 1, 1, 1], [1, 1, 3, 2, float("-inf"), 1]], dtype=dtype)
    assert largest(x, 3).tolist() == [[1, 2, 3], [0, 2, 3]]
    assert largest(x, 6).tolist() == [list(range(6))] * 2  # k ≥ columns: all of them
    assert largest(x, 9).tolist() == [list(range(6))] * 2
    ties = torch.zeros(4, 50, dtype=dtype)  # every row tied (underflowed hardness)
    assert torch.equal(largest(ties, 7), torch.arange(7).expand(4, 7))


def test_a_transposed_view_selects_as_its_copy():
    # The dense path selects the v anchors' negatives from the transpose of the u anchors'
    # b (one matrix for both views).
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 4, (25, 25), generator=g).double()
    assert torch.equal(largest(x.T, 6), largest(x.T.contiguous(), 6))
    assert largest(x.T, 6).tolist() == sorted_reference(x.T, 6)


def test_select_hardest_gives_the_largest_their_values_and_a_pairing():
    g = torch.Generator().manual_seed(2)
    b = torch.rand(9, 30, generator=g, dtype=torch.float64)
    for k in (1, 5, 30):
        idx, values, perm = select_hardest(b.log(), k)  # (from log b: b itself returned)
        assert torch.equal(idx, largest(b, k))
        torch.testing.assert_close(values, b.gather(1, idx), rtol=1e-15, atol=0)
        assert sorted(perm.tolist()) == list(range(k))
