"""The numpy logic the Python-backend models run, tested without Triton."""

from itertools import pairwise

import numpy as np
import pytest
import torch

from embtrt.reference.torch_ref import torch_pool
from embtrt_backend import InputError
from embtrt_backend.pooling import l2_normalize, last_token_index, pool, pool_and_normalize
from embtrt_backend.routing import assign_buckets, gather, plan
from embtrt_backend.text import TextTokenizer, decode_texts


def _data(seed=0, left=False):
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((5, 9, 7)).astype(np.float32)
    lens = np.array([9, 1, 4, 6, 2])
    mask = np.zeros((5, 9), dtype=np.int64)
    for i, n in enumerate(lens):
        if left:
            mask[i, 9 - n:] = 1
        else:
            mask[i, :n] = 1
    return h, mask, lens


def _loop_reference(h, mask, mode):
    """Plain per-row loops: the definition of each pooling."""
    out = []
    for i in range(h.shape[0]):
        idx = np.nonzero(mask[i])[0]
        if mode == "cls":
            out.append(h[i, 0])
        elif mode == "mean":
            out.append(h[i, idx].mean(axis=0))
        else:
            out.append(h[i, idx[-1]])
    return np.stack(out)


@pytest.mark.parametrize("mode,left", [("cls", False), ("mean", False), ("mean", True),
                                       ("last-token", False), ("last-token", True)])
def test_pooling_equals_the_per_row_definition_and_torch(mode, left):
    h, mask, _ = _data(left=left)
    got = pool(h, mask, mode)
    np.testing.assert_allclose(got, _loop_reference(h, mask, mode), rtol=1e-5, atol=1e-6)
    t = torch_pool(torch.from_numpy(h), torch.from_numpy(mask), mode).numpy()
    np.testing.assert_allclose(got, t, rtol=1e-5, atol=1e-6)


def test_last_token_index_handles_both_padding_sides():
    _, right, lens = _data()
    _, left, _ = _data(left=True)
    assert last_token_index(right).tolist() == (lens - 1).tolist()
    assert last_token_index(left).tolist() == [8] * 5


def test_l2_normalize_matches_torch_and_keeps_zero_rows_finite():
    x = np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32)
    got = l2_normalize(x)
    want = torch.nn.functional.normalize(torch.from_numpy(x), p=2, dim=1).numpy()
    np.testing.assert_allclose(got, want)
    assert np.all(np.isfinite(got))


def test_pool_rejects_mismatched_shapes():
    with pytest.raises(ValueError):
        pool(np.zeros((2, 3, 4)), np.zeros((2, 4)), "mean")
    with pytest.raises(ValueError, match="unknown pooling"):
        pool_and_normalize(np.zeros((1, 2, 3)), np.ones((1, 2)), "max", True)


def test_router_assigns_the_smallest_bucket_that_holds_each_row():
    assert assign_buckets(np.array([1, 32, 33, 128, 129, 256]), (32, 128, 256)).tolist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError):
        assign_buckets(np.array([257]), (32, 128, 256))


def test_router_keeps_order_when_rows_span_buckets():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 257, size=101)
    chunks = plan(lengths, (32, 128, 256), max_batch=8)
    assert all(len(rows) <= 8 for _, rows in chunks)
    covered = np.concatenate([rows for _, rows in chunks])
    assert sorted(covered.tolist()) == list(range(101))
    for b, rows in chunks:
        assert np.all(lengths[rows] <= (32, 128, 256)[b])
        assert b == 0 or np.all(lengths[rows] > (32, 128, 256)[b - 1])
    # each "encoder" returns a vector encoding the row id; gather must restore request order
    parts = [(rows, np.repeat(rows[:, None].astype(np.float32), 3, axis=1)) for _, rows in chunks]
    out = gather(101, 3, parts)
    assert out[:, 0].tolist() == list(range(101))


def test_gather_refuses_missing_or_duplicate_rows():
    with pytest.raises(ValueError, match="never filled"):
        gather(3, 2, [(np.array([0, 1]), np.zeros((2, 2), np.float32))])
    with pytest.raises(ValueError, match="twice"):
        gather(2, 2, [(np.array([0, 1]), np.zeros((2, 2), np.float32)), (np.array([1]), np.zeros((1, 2), np.float32))])


def test_decode_texts_rejects_invalid_utf8_and_oversized_text():
    ok = decode_texts(np.array([[b"caf\xc3\xa9"], [b""]], dtype=object), 100)
    assert ok == ["café", ""]
    with pytest.raises(InputError, match="row 1: TEXT is not valid UTF-8"):
        decode_texts(np.array([[b"fine"], [b"\xff\xfe"]], dtype=object), 100)
    with pytest.raises(InputError, match="over the limit"):
        decode_texts(np.array([[b"x" * 101]], dtype=object), 100)


def test_serving_tokenizer_truncates_like_sentence_transformers(minilm_path, corpus):
    from transformers import AutoTokenizer

    ours = TextTokenizer(str(minilm_path / "tokenizer.json"), 256, 0)
    ref = AutoTokenizer.from_pretrained(str(minilm_path))
    enc = ours.encode(corpus)
    want = ref(corpus, truncation=True, max_length=256)["input_ids"]
    assert [list(x) for x in enc.ids] == want
    assert enc.lengths.max() == 256  # the corpus has over-long texts; they are truncated
    feeds = ours.pad(enc, [0, 1], 256, ("input_ids", "attention_mask", "token_type_ids"))
    assert feeds["input_ids"].shape == (2, 256) and feeds["attention_mask"].sum() == enc.lengths[:2].sum()


def test_reject_mode_names_the_over_long_row(minilm_path):
    tok = TextTokenizer(str(minilm_path / "tokenizer.json"), 16, 0, overflow="reject")
    enc = tok.encode(["short text", "word " * 40])
    with pytest.raises(InputError, match="row 1: text is longer than the max sequence length 16"):
        tok.check(enc.lengths)
    tok.check(enc.lengths[:1])  # the short row alone passes


def test_over_long_texts_are_refused_under_truncate_none_or_a_reject_build_unless_the_request_truncates(minilm_path):
    path = str(minilm_path / "tokenizer.json")
    cut, reject = TextTokenizer(path, 16, 0), TextTokenizer(path, 16, 0, overflow="reject")
    assert [cut.refuses_long(t) for t in (None, "NONE", "END", "START")] == [False, True, False, False]
    assert [reject.refuses_long(t) for t in (None, "NONE", "END", "START")] == [True, True, False, False]


def test_bucket_tokenizer_refuses_rows_longer_than_its_bucket(minilm_path):
    tok = TextTokenizer(str(minilm_path / "tokenizer.json"), 256, 0)
    enc = tok.encode(["short", "word " * 50])
    with pytest.raises(InputError, match="row 1: 52 tokens do not fit this 32-token bucket"):
        tok.check(enc.lengths, 32)


def test_padding_aware_chunks_are_optimal_and_bounded():
    from itertools import combinations

    from embtrt_backend.routing import chunk_sorted

    lengths = np.array([3, 4, 4, 5, 12, 13, 30, 31])

    def cost(bounds, c):
        return sum(c + (e - s) * lengths[e - 1] for s, e in bounds)

    for c, mb in ((0, 8), (8, 8), (100, 8), (8, 3)):
        got = chunk_sorted(lengths, mb, c)
        assert got[0][0] == 0 and got[-1][1] == len(lengths)
        assert all(e - s <= mb for s, e in got) and all(a[1] == b[0] for a, b in pairwise(got))
        best = min(cost(list(zip((0,) + cuts, cuts + (len(lengths),), strict=True)), c)
                   for k in range(len(lengths)) for cuts in combinations(range(1, len(lengths)), k)
                   if all(e - s <= mb for s, e in zip((0,) + cuts, cuts + (len(lengths),), strict=True)))
        assert cost(got, c) == best  # exhaustive check of the dynamic program
    assert chunk_sorted(lengths, 8, 10_000) == [(0, 8)]  # huge run overhead: one chunk
    assert len(chunk_sorted(lengths, 8, 0)) >= 4  # no overhead: split wherever the length grows


def test_fixed_shape_plans_fill_chunks_to_max_batch():
    lengths = np.array([2, 3, 30, 31, 5, 6, 7, 8, 9, 10])
    chunks = plan(lengths, (32,), max_batch=4, pad_to_bucket=True)
    assert sorted(len(r) for _, r in chunks) == [2, 4, 4]


def test_balanced_parts_minimise_the_largest_padded_part():
    from itertools import combinations

    from embtrt_backend.encoder import balanced_parts

    rng = np.random.default_rng(3)
    for _ in range(40):
        n = int(rng.integers(1, 9))
        lengths = np.sort(rng.integers(1, 40, n)) if rng.random() < 0.7 else rng.integers(1, 40, n)
        parts = int(rng.integers(1, 4))
        got = balanced_parts(lengths, parts)
        assert got[0][0] == 0 and got[-1][1] == n and len(got) <= parts
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in pairwise(got))

        def worst(bounds, lengths=lengths):
            return max((e - s) * int(lengths[s:e].max()) for s, e in bounds)

        best = min(worst(list(zip((0,) + cuts, cuts + (n,), strict=True)))
                   for k in range(min(parts, n)) for cuts in combinations(range(1, n), k))
        assert worst(got) == best  # exhaustive check
    assert balanced_parts(np.array([], dtype=np.int64), 2) == []


def test_trim_padding_drops_only_all_padding_columns():
    from embtrt_backend.encoder import trim_padding

    right = {"input_ids": np.array([[5, 6, 0, 0, 0], [7, 0, 0, 0, 0]]),
             "attention_mask": np.array([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])}
    out = trim_padding(right)
    assert out["input_ids"].tolist() == [[5, 6], [7, 0]] and out["attention_mask"].tolist() == [[1, 1], [1, 0]]
    left = {"input_ids": np.array([[0, 0, 5, 6], [0, 0, 0, 7]]), "attention_mask": np.array([[0, 0, 1, 1], [0, 0, 0, 1]])}
    assert trim_padding(left)["input_ids"].tolist() == [[5, 6], [0, 7]]
    full = {"input_ids": np.ones((2, 3), dtype=np.int64), "attention_mask": np.ones((2, 3), dtype=np.int64)}
    assert trim_padding(full) is full


def test_openvino_encoder_equals_onnx_runtime_and_its_row_split_is_exact(tiny_repos, corpus):
    """The real OpenVINO CPU plugin on a tiny BERT export: fp32 equals ONNX Runtime, and a batch cut
    across two streams (each slice re-padded to its own longest row) equals one whole-batch run."""
    pytest.importorskip("openvino")
    from embtrt_backend.encoder import OpenVinoEncoder, OrtEncoder

    repo = tiny_repos["bert-cls"]
    onnx = str(repo / "bert_cls" / "1" / "model.onnx")
    tok = TextTokenizer(str(repo / "bert_cls" / "1" / "tokenizer.json"), 64, 0)
    texts = sorted(corpus[:24], key=len)
    enc = tok.encode(texts)
    names = ("input_ids", "attention_mask", "token_type_ids")
    feeds = tok.pad(enc, list(range(len(texts))), int(enc.lengths.max()), names)
    ref = OrtEncoder(onnx).run(feeds)
    two = OpenVinoEncoder(onnx, "fp32", intra_threads=2)
    one = OpenVinoEncoder(onnx, "fp32", intra_threads=1)
    assert two.streams == 2 and one.streams == 1
    a, b = two.run(feeds), one.run(feeds)
    assert a.shape == ref.shape == b.shape
    assert np.abs(a - ref).max() < 1e-4 and np.abs(b - ref).max() < 1e-4
    np.testing.assert_allclose(a, b, atol=1e-5)
    single = two.run({k: v[:1] for k, v in feeds.items()})  # one row: one stream
    np.testing.assert_allclose(single[0], ref[0], atol=1e-4)
    with pytest.raises(ValueError, match="fp32 or bf16"):
        OpenVinoEncoder(onnx, "int8")


def test_single_rows_are_padded_to_a_few_shapes_and_batches_are_not():
    from embtrt_backend.encoder import pad_single_row

    one = {"input_ids": np.array([[101, 7, 8, 102]]), "attention_mask": np.ones((1, 4), dtype=np.int64)}
    out = pad_single_row(one, 32)
    assert out["input_ids"].shape == (1, 32) and out["attention_mask"][0].tolist() == [1] * 4 + [0] * 28
    assert out["input_ids"][0, :4].tolist() == [101, 7, 8, 102]
    assert pad_single_row(one, 4) is one and pad_single_row(one, 0) is one
    two = {k: np.repeat(v, 2, axis=0) for k, v in one.items()}
    assert pad_single_row(two, 32) is two  # batches keep their exact shape
    padded = {"input_ids": np.array([[0, 101, 102]]), "attention_mask": np.array([[0, 1, 1]])}
    assert pad_single_row(padded, 32) is padded  # a row that already carries padding is left alone
