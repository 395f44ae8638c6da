"""reference.ranking: the one rule every kind's retrieval or ranking check judges by (#68): fp32, the served top
k a ranking of the reference's scores up to a constant tie; reduced precision, top-k overlap >= 0.98 and NDCG@k
regression <= 0.005. Each figure fails on a planted fault: a shuffled order, noise beyond the tie, a better item
left out, a NaN, a short answer."""

import numpy as np
import pytest

from embtrt.reference.ranking import MAX_NDCG_REGRESSION, MIN_OVERLAP, agreement, ndcg, ranks_within, top_k

TIE = 2e-4


def _rows(n=12, width=40, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=width) for _ in range(n)]


def test_the_reference_itself_passes_every_figure():
    ref = _rows()
    a = agreement(ref, [r.copy() for r in ref], 10, TIE)
    assert (a.identical, a.within_ties, a.queries, a.overlap, a.ndcg) == (12, 12, 12, 1.0, 1.0)
    assert a.passes("fp32") and a.passes("fp16")


def test_a_true_near_tie_passes_fp32_but_is_not_counted_identical():
    ref = _rows()
    got = [r.copy() for r in ref]
    for r, g in zip(ref, got, strict=True):
        a, b = top_k(r, 3)[1:3]          # the second and third best, moved 1e-5 apart, then swapped in the served
        r[b] = r[a] - 1e-5
        g[a], g[b] = r[b], r[a]
    v = agreement(got, ref, 10, TIE)
    assert v.within_ties == 12 and v.identical == 0 and v.passes("fp32")


def test_a_shuffled_served_order_fails_fp32_and_reduced():
    ref = _rows()
    rng = np.random.default_rng(5)
    got = [rng.permutation(r) for r in ref]
    v = agreement(got, ref, 10, TIE)
    assert v.within_ties == 0 and not v.passes("fp32") and not v.passes("fp16")
    assert v.overlap < MIN_OVERLAP and v.ndcg_regression > MAX_NDCG_REGRESSION


def test_noise_beyond_the_tie_fails_fp32_whatever_the_measured_error():
    """The old text-and-image rule took its tie from the measured error, so any noisy order passed: the constant
    tie refuses a swap of items 1e-2 apart however large the noise was."""
    ref = [np.linspace(1.0, 0.0, 30) for _ in range(4)]      # neighbours 0.034 apart
    got = [r + np.random.default_rng(i).normal(scale=0.05, size=30) for i, r in enumerate(ref)]
    v = agreement(got, ref, 10, TIE)
    assert v.within_ties < 4 and not v.passes("fp32")


def test_reduced_precision_fails_on_overlap_or_on_ndcg_alone():
    ref = [np.linspace(1.0, 0.0, 30) for _ in range(10)]
    swap_top = [r.copy() for r in ref]
    for g in swap_top:
        g[0], g[9] = g[9], g[0]           # same top 10 members, the best one ranked tenth: NDCG only
    v = agreement(swap_top, ref, 10, TIE)
    assert v.overlap == 1.0 and v.ndcg_regression > MAX_NDCG_REGRESSION and not v.passes("bf16")
    assert v.failure("bf16", 10) == [f"NDCG@10 regression {v.ndcg_regression:.4f} > {MAX_NDCG_REGRESSION}"]
    lost = [r.copy() for r in ref]
    lost[0][9], lost[0][10] = lost[0][10], lost[0][9]   # one row: its tenth item swapped out (overlap 0.99)
    ok = agreement(lost, ref, 10, TIE)
    assert ok.overlap == pytest.approx(0.99) and ok.passes("bf16")
    for g in lost[1:3]:
        g[9], g[10] = g[10], g[9]
    bad = agreement(lost, ref, 10, TIE)
    assert bad.overlap == pytest.approx(0.97) and not bad.passes("bf16")


def test_ranks_within_refuses_a_better_item_left_out_a_duplicate_and_swaps_that_add_up():
    want = np.array([0.9, 0.5, 0.5 + 1e-6, 0.1, 0.3])
    assert ranks_within([0, 2, 1], want, 3, 2e-6) and ranks_within([0, 1, 2], want, 3, 2e-6)
    assert not ranks_within([0, 1, 4], want, 3, 2e-6)
    assert not ranks_within([0, 1, 1], want, 3, 2e-6)
    steps = 1.0 - 1.5e-6 * np.arange(10)       # each neighbour within the tie, the ends 1.35e-5 apart
    assert not ranks_within(list(range(9, -1, -1)), steps, 10, 2e-6)


def test_a_nan_or_a_short_answer_fails():
    ref = _rows(3)
    got = [r.copy() for r in ref]
    got[1][4] = np.nan
    v = agreement(got, ref, 10, TIE)
    assert v.within_ties == 2 and v.identical == 2 and not v.passes("fp32") and v.overlap < MIN_OVERLAP
    many = _rows(300)
    one_nan = [r.copy() for r in many]
    one_nan[7][0] = np.nan                          # 1 of 300: the means alone would still pass reduced precision
    diluted = agreement(one_nan, many, 10, TIE)
    assert diluted.overlap > MIN_OVERLAP and diluted.nonfinite == 1 and not diluted.passes("bf16")
    assert diluted.failure("bf16", 10) == ["1 of 300 queries have a NaN or inf score"]
    empty = agreement([np.zeros(0)], [np.zeros(0)], 10, np.float64(TIE))   # no candidates; a numpy scalar tie
    assert (empty.overlap, empty.ndcg) == (1.0, 1.0) and empty.passes("fp32") and empty.passes("bf16")
    with pytest.raises(ValueError, match="2 served rankings against 3"):
        agreement(ref[:2], ref, 10, TIE)
    with pytest.raises(ValueError, match="served row"):
        agreement([ref[0][:5], ref[1], ref[2]], ref, 10, TIE)


def test_ndcg_grades_by_the_reference_top_k_and_top_k_keeps_ties_in_index_order():
    assert ndcg([1, 2, 3], [1, 2, 3]) == 1.0 and ndcg([7, 8, 9], [1, 2, 3]) == 0.0
    assert ndcg([2, 1, 3], [1, 2, 3]) < ndcg([1, 3, 2], [1, 2, 3]) < 1.0   # a swap at the top costs more
    assert top_k(np.array([0.5, 0.9, 0.5, 0.1]), 3) == [1, 0, 2]
