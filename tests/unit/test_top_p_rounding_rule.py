"""The GPU radix test's one exception (tests/gpu/test_ddtree_core_gpu.py, top_p_crossing_within_rounding),
checked on CPU: it accepts a kernel cut that keeps a different number of tied tokens only where the top-p
limit sits within float32 rounding of their mass, and nothing wider."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.test_ddtree_core_gpu import TOP_P_ROUNDING, top_p_crossing_within_rounding
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
