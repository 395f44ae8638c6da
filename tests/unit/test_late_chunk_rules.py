"""#71: late chunking's rules without a server (python_backend/embtrt_backend/late_chunks.py, and the gateway's forms:
builder/embtrt/scale/gateway/ops/late.py): the join, which
chunk owns each token (its last character's), the pooling, the spans' checks. The served case against
sentence-transformers is tests/integration/test_late_chunking.py."""

from __future__ import annotations

import numpy as np
import pytest

from embtrt.scale.gateway.ops import late as scale_late
from embtrt_backend import late_chunks as lc
from embtrt.scale.gateway.errors import ApiError


def test_consecutive_chunks_are_joined_by_one_space_and_each_span_is_its_own_text():
    doc, spans = lc.join(["ab", "cde", "f"])
    assert doc == "ab cde f" and [doc[a:b] for a, b in spans] == ["ab", "cde", "f"]


def test_a_token_goes_with_its_last_character_and_special_or_outside_tokens_with_none():
    # "[CLS] ab Ġcd e [SEP]" over "ab cd e": the byte-level piece " cd" starts at the space but ends in chunk 1
    offsets = [(0, 0), (0, 2), (2, 5), (6, 7), (0, 0)]
    special = [1, 0, 0, 0, 1]
    assert lc.owners(offsets, special, [(0, 2), (3, 5), (6, 7)]).tolist() == [-1, 0, 1, 2, -1]
    # explicit spans with a gap: "cd" is outside every span
    assert lc.owners(offsets, special, [(0, 2), (6, 7)]).tolist() == [-1, 0, -1, 1, -1]


def test_each_chunk_is_the_mean_of_its_tokens_normalized_where_the_model_normalizes_and_an_empty_one_is_named():
    tokens = np.array([[9, 9], [1, 0], [3, 0], [0, 2], [9, 9]], np.float32)
    owner = np.array([-1, 0, 0, 1, -1])
    assert np.allclose(lc.pool(tokens, owner, 2, False), [[2, 0], [0, 2]])
    assert np.allclose(lc.pool(tokens, owner, 2, True), [[1, 0], [0, 1]])
    assert lc.first_empty(owner, 2) is None and lc.first_empty(owner, 3) == 2


@pytest.mark.parametrize(("spans", "said"), [
    ([], "non-empty list"), ([[0, 2], [1, 3]], "do not overlap"), ([[2, 2]], "not a non-empty span"),
    ([[0, 99]], "not a non-empty span"), ([[0, "2"]], "two integers"), ([[0, 1, 2]], "two integers"),
])
def test_explicit_spans_are_checked_naming_the_first_at_fault(spans, said):
    with pytest.raises(ApiError, match=said):
        scale_late.check_spans("abcdef", spans)
    assert scale_late.check_spans("abcdef", [[0, 2], [2, 6]]) == [(0, 2), (2, 6)]


def test_the_pool_equals_each_chunks_plain_mean_and_the_refusal_names_a_chunk_even_when_only_a_special_token_overflows():
    rng = np.random.default_rng(0)
    tokens = rng.standard_normal((50, 8)).astype(np.float32)
    owner = np.array([-1] + [0] * 10 + [1] * 5 + [-1] * 3 + [2] * 30 + [-1])
    want = np.stack([tokens[owner == k].mean(axis=0) for k in range(3)])
    assert np.abs(lc.pool(tokens, owner, 3, False) - want).max() <= 1e-6
    # only [SEP] past the limit: the last chunk is named, not input[0]
    assert lc.not_fitting(np.array([-1, 0, 1, 2, -1]), 4) == 2
    assert lc.not_fitting(np.array([-1, 0, 1, 2, 2, -1]), 3) == 2
    # a chunk with no token is zeros (refused before pooling: first_empty), the others unchanged
    gap = owner.copy()
    gap[gap == 1] = -1
    got = lc.pool(tokens, gap, 3, False)
    assert not got[1].any() and np.abs(got[[0, 2]] - want[[0, 2]]).max() <= 1e-6
