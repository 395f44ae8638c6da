"""reference.ranking: the one top-k agreement the reranker gate, the sparse gate's retrieval check
and `verify --against` judge by."""

import numpy as np

from embtrt.reference.ranking import Agreement, top_k


def test_identical_lists_overlap_and_the_two_verdicts():
    a = Agreement.of([[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 6, 5]])
    assert (a.identical, a.queries, a.overlap) == (1, 2, 1.0)     # same members, one order differs
    assert not a.passes(None) and a.passes(0.98)
    b = Agreement.of([[1, 2, 9], [4, 5, 6]], [[1, 2, 3], [4, 5, 6]])
    assert (b.identical, round(b.overlap, 4)) == (1, round((2 / 3 + 1) / 2, 4)) and not b.passes(0.98)
    assert Agreement.of([], []).passes(None) and Agreement.of([], []).overlap == 1.0


def test_top_k_keeps_ties_in_index_order():
    assert top_k(np.array([0.5, 0.9, 0.5, 0.1]), 3) == [1, 0, 2]
