"""The request core (embtrt_backend.core) without Triton: the bundled MiniLM's tokenizer, its PyTorch
encoder passed in as the encoder call (hidden states; the core pools), every case compared row by row
with SentenceTransformer.encode under the same options."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from embtrt_backend import InputError
from embtrt_backend.core import CoreConfig, Request, RequestCore
from embtrt_backend.options import ModelOptions
from embtrt_backend.text import TextTokenizer

BUCKETS = (16, 64, 256)


def _cos_min(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(axis=1).min())


@pytest.fixture(scope="module")
def folder(minilm_path, tmp_path_factory):
    """The bundled MiniLM with a query prompt left out of pooling (include_prompt false), so that the
    prompt's tokens and the pooling mask are checked; sentence-transformers loads it as well."""
    from tiny_models import with_prompts

    return with_prompts(minilm_path, tmp_path_factory.mktemp("core") / "minilm",
                        {"query": "query: ", "passage": ""}, None, include_prompt=False)


@pytest.fixture(scope="module")
def st(folder):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu")


@pytest.fixture(scope="module")
def encoder(folder):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(folder)).eval()
    calls: list[tuple[int, tuple]] = []

    def run(bucket: int, feeds: dict[str, np.ndarray]) -> np.ndarray:
        calls.append((bucket, feeds["input_ids"].shape))
        with torch.no_grad():
            out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
        return out.last_hidden_state.numpy()

    run.calls = calls  # type: ignore[attr-defined]
    return run


def _core(folder, calibration=None, overflow="truncate", max_batch=(8, 4, 2)) -> RequestCore:
    cfg_st = json.loads((folder / "config_sentence_transformers.json").read_text())
    tok = TextTokenizer(str(folder / "tokenizer.json"), 256, 0, overflow)
    opts = ModelOptions(dim=384, normalize=True, prompts=cfg_st["prompts"], include_prompt=False, calibration=calibration)
    cfg = CoreConfig(buckets=BUCKETS, max_batch=max_batch, input_names=("input_ids", "attention_mask", "token_type_ids"),
                     dim=384, fused=False, pooling="mean", normalize=True, run_overhead=8)
    return RequestCore(cfg, tok, opts)


def test_core_equals_sentence_transformers_row_by_row_across_buckets(folder, st, encoder, corpus):
    texts = corpus[:40] + [" ".join(corpus[40:48])]  # short, middle and one cut at 256 tokens
    core = _core(folder)
    out = core.run([Request(texts[:25]), Request(texts[25:])], encoder)
    got = np.concatenate([o.vectors for o in out])
    ref = st.encode(texts, convert_to_numpy=True)
    assert got.shape == ref.shape
    assert _cos_min(got, ref) >= 0.9999
    # every row is its own text: a row moved by one is far off
    assert _cos_min(np.roll(got, 1, axis=0), ref) < 0.99
    assert {b for b, _ in encoder.calls} == set(BUCKETS)
    # tokens per text, as the tokenizer counts them with truncation at 256
    assert [int(x) for o in out for x in o.tokens] == st.tokenize(texts)["attention_mask"].sum(1).tolist()


def test_core_applies_each_requests_own_options_in_one_batch(folder, st, encoder, corpus):
    texts = corpus[50:56]
    cal = st.encode(corpus[100:164], convert_to_numpy=True)
    core = _core(folder, calibration=cal)
    o = core.options
    reqs = [Request(texts, None, o.resolve({"input_type": "query"})),
            Request(texts, None, o.resolve({"prompt_name": "passage", "dimensions": 128})),
            Request(texts, None, o.resolve({"embedding_type": "int8"})),
            Request(texts, None, o.resolve({"embedding_type": "ubinary", "dimensions": 64}))]
    out = core.run(reqs, encoder)
    q = st.encode(texts, prompt_name="query", convert_to_numpy=True)
    assert _cos_min(out[0].vectors, q) >= 0.9999
    plain = st.encode(texts, convert_to_numpy=True)
    assert _cos_min(out[0].vectors, plain) < 0.999      # the prompt changed the vectors: it was applied
    p128 = st.encode(texts, prompt_name="passage", truncate_dim=128, normalize_embeddings=True, convert_to_numpy=True)
    assert out[1].vectors.shape == (6, 128) and _cos_min(out[1].vectors, p128) >= 0.9999
    try:
        from sentence_transformers.util.quantization import quantize_embeddings
    except ImportError:  # sentence-transformers before 5.2
        from sentence_transformers.quantization import quantize_embeddings

    ranges = np.vstack((cal.min(axis=0), cal.max(axis=0)))
    ref_i8 = quantize_embeddings(plain, "int8", ranges=ranges)
    assert out[2].vectors.dtype == np.int8 and np.abs(out[2].vectors.astype(int) - ref_i8.astype(int)).max() <= 1
    ref_ub = quantize_embeddings(st.encode(texts, truncate_dim=64, convert_to_numpy=True), "ubinary")
    assert out[3].vectors.dtype == np.uint8 and (out[3].vectors != ref_ub).mean() < 0.02
    # the prompt's tokens count in usage, and are left out of pooling (include_prompt false)
    assert (out[0].tokens > out[1].tokens).all()
    from embtrt_backend.options import prompt_length

    assert core.skip_of(reqs[0].options) == prompt_length(core.tokenizer.tok, "query: ") > 0


def test_core_truncates_each_side_as_a_left_or_right_truncating_tokenizer(folder, st, encoder, corpus):
    long = [" ".join(corpus[i:i + 12]) for i in (0, 20)]
    core = _core(folder)
    start, end = core.run([Request(long, None, core.options.resolve({"truncate": "START"})),
                           Request(long, None, core.options.resolve({"truncate": "END"}))], encoder)
    assert _cos_min(end.vectors, st.encode(long, convert_to_numpy=True)) >= 0.9999
    st.tokenizer.truncation_side = "left"
    try:
        ref_start = st.encode(long, convert_to_numpy=True)
    finally:
        st.tokenizer.truncation_side = "right"
    assert _cos_min(start.vectors, ref_start) >= 0.9999
    assert _cos_min(start.vectors, end.vectors) < 0.99


def test_core_refuses_only_the_request_that_may_not_be_cut(folder, st, encoder, corpus):
    long = " ".join(corpus[:12])
    core = _core(folder)
    ok, bad = core.run([Request(corpus[:3]), Request([corpus[3], long], None, core.options.resolve({"truncate": "NONE"}))],
                       encoder)
    assert isinstance(bad.error, InputError) and "row 1: text is longer than the max sequence length 256" in str(bad.error)
    assert _cos_min(ok.vectors, st.encode(corpus[:3], convert_to_numpy=True)) >= 0.9999


def test_core_embeds_token_ids_as_given(folder, st, encoder, corpus):
    core = _core(folder)
    ids = [st.tokenizer(t, truncation=True, max_length=256)["input_ids"] for t in corpus[:5]]
    out = core.run([Request(None, ids)], encoder)[0]
    assert _cos_min(out.vectors, st.encode(corpus[:5], convert_to_numpy=True)) >= 0.9999
    assert out.tokens.tolist() == [len(x) for x in ids]


def test_core_plans_within_each_buckets_max_batch(folder, encoder, corpus):
    encoder.calls.clear()
    core = _core(folder, max_batch=(3, 2, 1))
    core.run([Request(corpus[:30])], encoder)
    limit = dict(zip(BUCKETS, (3, 2, 1), strict=True))
    assert encoder.calls and all(shape[0] <= limit[b] and shape[1] <= b for b, shape in encoder.calls)


def test_an_encoder_failure_fails_the_served_requests_not_the_caller(folder, corpus):
    core = _core(folder)

    def broken(bucket, feeds):
        raise RuntimeError("encoder down")

    out = core.run([Request(corpus[:2]), Request([" ".join(corpus[:12])], None, core.options.resolve({"truncate": "NONE"}))],
                   broken)
    assert str(out[0].error) == "encoder down" and isinstance(out[1].error, InputError)


def test_a_text_of_no_tokens_is_its_requests_error_and_the_batch_is_served(folder, encoder, tmp_path):
    """A tokenizer without special tokens (as some decoder models ship) makes an empty text a row of no
    tokens, which no encoder can run: that request's clear error, never the runtime's for the batch."""
    raw = json.loads((folder / "tokenizer.json").read_text())
    raw["post_processor"] = None
    (tmp_path / "tokenizer.json").write_text(json.dumps(raw))
    core = _core(folder)
    core.tokenizer = TextTokenizer(str(tmp_path / "tokenizer.json"), 256, 0, "truncate")
    empty, ok, no_ids = core.run([Request(["a text", ""]), Request(["a text", "another"]), Request(None, [[5], []])],
                                 encoder)
    assert isinstance(empty.error, InputError) and str(empty.error) == "row 1: the text tokenizes to no tokens"
    assert empty.error.row == 1
    assert isinstance(no_ids.error, InputError) and str(no_ids.error) == "row 1: no token ids"
    assert ok.error is None and ok.vectors.shape == (2, 384) and ok.tokens.tolist() == [2, 1]


def test_a_request_of_no_texts_is_served_empty_beside_token_ids(folder, encoder):
    """No texts -> no rows, an empty result (as before the one core), whatever it is batched with."""
    core = _core(folder)
    empty, ids = core.run([Request([]), Request(None, [[101, 7592, 102]])], encoder)
    assert empty.error is None and empty.vectors.shape == (0, 384) and empty.tokens.tolist() == []
    assert ids.error is None and ids.vectors.shape == (1, 384) and ids.tokens.tolist() == [3]
