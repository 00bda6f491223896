"""The GPU radix test's one exception (tests/gpu/test_ddtree_core_gpu.py, top_p_crossing_within_rounding),
checked on CPU: it accepts a kernel cut that keeps a different number of tied tokens only where the top-p
limit sits within float32 rounding of their mass, and nothing wider."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.test_ddtree_core_gpu import (
    TOP_P_ROUNDING,
    TieCrossing,
    top_p_crossing_report,
    top_p_crossing_within_rounding,
)
from tests.unit import test_ddtree_core as core


def tied_row(vocab: int = 4000) -> torch.Tensor:
    """One leading token (logit 3) and a run of vocab - 1 tokens tied at 0: a top-p cut falls in the run."""
    return torch.cat([torch.tensor([3.0]), torch.zeros(vocab - 1)])


def cut_with_limit_at(du, logits: torch.Tensor, kept: int, offset: float) -> tuple[float, dict]:
    """A top-p whose limit sits `offset` (relative to the row's mass) above the mass before the kept-th token
    of the order, and the reference's cut for it (pytorch rule)."""
    w = torch.exp(logits - logits.max()).double()
    total = float(w.sum())
    before = float(w[: kept - 1].sum())  # the order is the index order here: the leader, then the ties
    top_p = (before + offset * total) / total
    return top_p, du.sampling_cut(logits.view(1, -1), torch.tensor([1.0]), None, torch.tensor([top_p]), None,
                                  keep_ties=False)  # fmt: skip


@pytest.mark.parametrize("side,shift,reference_last", [(1, -1, 1499), (-1, 1, 1498)])
def test_one_tied_token_more_or_less_at_a_limit_within_rounding_is_accepted(
    side: int, shift: int, reference_last: int
) -> None:
    """The limit a tenth of the tolerance above (below) the mass before token 1499: the reference keeps it
    (drops it), a float32 sum may not; the kernel's cut one token shorter (longer) is accepted."""
    du = core.load()
    logits = tied_row()
    top_p, want = cut_with_limit_at(du, logits, kept=1500, offset=side * TOP_P_ROUNDING / 10)
    got = {key: value.clone() for key, value in want.items()}
    got["cut_idx"] += shift
    assert int(want["cut_idx"]) == reference_last
    assert top_p_crossing_within_rounding(du, logits, top_p, None, False, 1.0, got, want, 0)


@pytest.mark.parametrize("shift,offset", [(1, 0.5), (40, TOP_P_ROUNDING / 10), (-40, TOP_P_ROUNDING / 10)])
def test_a_cut_off_by_more_than_rounding_is_refused(shift: int, offset: float) -> None:
    """Half a tied token's mass from the limit, or 40 tokens away: a real disagreement, not rounding."""
    du = core.load()
    logits = tied_row()
    w_tie = 1.0 / float(torch.exp(logits - logits.max()).sum())
    top_p, want = cut_with_limit_at(du, logits, kept=1500, offset=offset * w_tie if offset == 0.5 else offset)
    got = {key: value.clone() for key, value in want.items()}
    got["cut_idx"] += shift
    assert not top_p_crossing_within_rounding(du, logits, top_p, None, False, 1.0, got, want, 0)


def test_a_different_row_max_is_refused() -> None:
    du = core.load()
    logits = tied_row()
    top_p, want = cut_with_limit_at(du, logits, kept=1500, offset=TOP_P_ROUNDING / 10)
    got = {key: value.clone() for key, value in want.items()}
    got["cut_idx"] += 1
    got["row_max"] += 1.0
    assert not top_p_crossing_within_rounding(du, logits, top_p, None, False, 1.0, got, want, 0)


class CudaScalarDivision(torch.Tensor):
    """A CPU tensor that divides by a Python number as CUDA does (a mock: no GPU here). On CUDA, torch's
    true division by a CPU scalar multiplies by the scalar's float32 reciprocal (BinaryDivTrueKernel.cu);
    on the CPU it divides. Division by a tensor, and every other operation, is left alone."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        divides = func in (torch.Tensor.__truediv__, torch.Tensor.div, torch.div, torch.true_divide)
        if divides and len(args) == 2 and isinstance(args[1], (int, float)) and not kwargs:
            plain = args[0].as_subclass(torch.Tensor)
            reciprocal = torch.tensor(1.0) / torch.tensor(float(args[1]))  # float32, as CUDA's opmath
            return plain * reciprocal
        return super().__torch_function__(func, types, args, kwargs)


TEMPERATURE = 1.3  # request 2 of the GPU radix test, whose row 18 failed on the H200


def reciprocal_misses(x: torch.Tensor) -> torch.Tensor:
    """Where x * float32(1 / 1.3) is not x / 1.3 in float32 (CUDA's scalar division vs the kernels')."""
    return x * (torch.tensor(1.0) / torch.tensor(TEMPERATURE)) != x / torch.tensor(TEMPERATURE)


def h200_like_row(vocab: int = 6000) -> tuple[torch.Tensor, float]:
    """Row 18's shape: a leading token, a run of bf16 ties every third id (the cut lies inside it) at a value
    x whose scalar-divided z is one ulp off the kernels', the other ids one bf16 step below x. Returns the
    logits and x."""
    candidates = torch.arange(128, 256, dtype=torch.float32) / 256  # the bf16 values in [0.5, 1)
    x = float(candidates[reciprocal_misses(candidates)][0])
    logits = torch.full((vocab,), x - 1 / 256)
    logits[::3] = x
    logits[1] = 8.0
    return logits, x


def test_cuda_scalar_division_mock_is_one_ulp_off_on_bf16_values() -> None:
    """The mock does what the H200 did: about a quarter of the bf16 values land one ulp from x / 1.3."""
    values = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    values = values[values.isfinite()]
    off = (values.as_subclass(CudaScalarDivision) / TEMPERATURE).as_subclass(torch.Tensor) != values / 1.3
    assert 0.1 < float(off.float().mean()) < 0.5, float(off.float().mean())
    assert torch.equal(reciprocal_misses(values), off)


def crossing_case(du) -> tuple[torch.Tensor, float, dict, torch.Tensor]:
    """h200_like_row with the limit a hundredth of a tie's weight above the mass before the 700th tie (the
    reference keeps it; a sum that rounds a hundredth of a weight up would not): top_p, the reference's cut
    (pytorch rule) and the run's ids."""
    logits, x = h200_like_row()
    z = logits / torch.tensor([TEMPERATURE])
    _, order = torch.sort(du._float_key(z), descending=True, stable=True)
    w = torch.exp(z[order] - z.max()).double()
    top_p = (float(w[:700].sum()) + 0.01 * float(w[1])) / float(w.sum())  # the leader and 699 ties before
    want = du.sampling_cut(logits.view(1, -1), torch.tensor([TEMPERATURE]), None, torch.tensor([top_p]), None,
                           keep_ties=False)  # fmt: skip
    return logits, top_p, want, (logits == x).nonzero().flatten()


def test_a_one_tie_crossing_at_temperature_1_3_is_seen_through_cuda_scalar_division() -> None:
    """Row 18 of the H200 (2026-12-02c..f), on CPU: the reference keeps the tie whose mass sits a hundredth
    of its weight below the limit, the kernel (its sums from the GPU's exp) one tie fewer, so its cut_idx
    names the previous tie of the run. With the diagnostics' z from a division by the Python float the run
    left the cut key under CUDA's scalar division, and the report read "kept N vs N, gaps nan", refused;
    with the kernels' z it reads N - 1 vs N, within rounding, accepted."""
    du = core.load()
    logits, top_p, want, run = crossing_case(du)
    assert int(want["cut_idx"]) == int(run[699])  # the 700th tie in id order
    got = {name: value.clone() for name, value in want.items()}
    got["cut_idx"][0] = run[698]
    on_cuda = logits.as_subclass(CudaScalarDivision)
    args = (du, on_cuda, top_p, None, False, TEMPERATURE, got, want, 0)
    crossing = TieCrossing.of(du, on_cuda, None, False, TEMPERATURE, got, want, 0)
    assert (crossing.kept_got, crossing.kept_want) == (700, 701), top_p_crossing_report(*args)
    assert top_p_crossing_within_rounding(*args)


def test_a_cut_naming_a_token_off_the_cut_key_is_refused_and_reported() -> None:
    """A cut_idx whose token is not of the cut key (a wrong z in the diagnostics, or a kernel naming the
    wrong token) is refused, and the report says so, instead of counting kept tokens that mean nothing."""
    du = core.load()
    logits, top_p, want, run = crossing_case(du)
    got = {name: value.clone() for name, value in want.items()}
    got["cut_idx"] += 1  # the id after the 700th tie: one bf16 step below the run
    assert int(got["cut_idx"]) not in run.tolist()
    args = (du, logits, top_p, None, False, TEMPERATURE, got, want, 0)
    assert not top_p_crossing_within_rounding(*args)
    assert "off the cut key" in top_p_crossing_report(*args)
