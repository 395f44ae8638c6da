"""The request options' numpy side (python_backend/embtrt_backend/options.py) against
sentence-transformers and the Hugging Face tokenizer, without Triton."""

import numpy as np
import pytest
from embtrt_backend import InputError
from embtrt_backend.options import ModelOptions, prompt_length, quantize
from embtrt_backend.text import TextTokenizer


def _opts(**kw):
    base = dict(dim=8, normalize=True, prompts={"query": "q: ", "document": ""}, default_prompt_name="query",
                calibration=np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32))
    return ModelOptions(**{**base, **kw})


@pytest.mark.parametrize("etype", ["int8", "uint8", "binary", "ubinary"])
def test_quantize_equals_sentence_transformers(etype):
    from sentence_transformers.util.quantization import quantize_embeddings

    rng = np.random.default_rng(1)
    cal, v = rng.normal(size=(200, 40)).astype(np.float32), rng.normal(size=(30, 40)).astype(np.float32)
    ranges = np.vstack((cal.min(0), cal.max(0)))
    got = quantize(v, etype, ranges)
    want = quantize_embeddings(v, precision=etype, calibration_embeddings=cal)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_options_resolve_defaults_and_name_the_bad_parameter():
    o = _opts()
    d = o.resolve({})
    assert (d.prompt_name, d.prompt, d.dimensions, d.truncate, d.embedding_type) == ("query", "q: ", None, None, "float")
    assert o.resolve({"input_type": "passage"}).prompt_name is None  # document: "" is no prompt text
    assert o.resolve({"dimensions": 4, "truncate": "start", "embedding_type": "UBINARY"}).truncate == "START"
    assert o.resolve({"dimensions": 4, "priority": 1}).dimensions == 4  # Triton's own parameters pass
    for raw, param in (({"prompt_name": "x"}, "prompt_name"), ({"dimensions": 9}, "dimensions"),
                       ({"dimensions": True}, "dimensions"), ({"truncate": "left"}, "truncate"),
                       ({"embedding_type": "fp8"}, "embedding_type"), ({"input_type": "code"}, "input_type"),
                       ({"prompt_name": 1}, "prompt_name"), ({"dimensions": "4"}, "dimensions"),
                       ({"dimension": 4}, "dimension")):
        with pytest.raises(InputError) as err:
            o.resolve(raw)
        assert err.value.param == param
    with pytest.raises(InputError, match="unknown request parameter 'dimension': the options are prompt_name, input_type"):
        o.resolve({"dimension": 4})
    with pytest.raises(InputError, match="allows 2, 4"):
        _opts(allowed_dimensions=(2, 4)).resolve({"dimensions": 3})
    with pytest.raises(InputError, match="needs calibration ranges, which this model does not carry"):
        _opts(calibration=None).resolve({"embedding_type": "int8"})


def test_width_and_ranges_follow_the_request():
    o = _opts()
    v = np.random.default_rng(2).normal(size=(5, 8)).astype(np.float32)
    w = o.finish(v, o.resolve({"dimensions": 3}))
    assert w.shape == (5, 3) and np.allclose(np.linalg.norm(w, axis=1), 1, atol=1e-6)
    q = o.finish(v, o.resolve({"dimensions": 3, "embedding_type": "int8"}))
    cal3 = o.calibration[:, :3] / np.linalg.norm(o.calibration[:, :3], axis=1, keepdims=True)
    from sentence_transformers.util.quantization import quantize_embeddings

    assert np.array_equal(q, quantize_embeddings(w, precision="int8", calibration_embeddings=cal3))


def test_prompt_length_counts_like_sentence_transformers(minilm_path):
    from sentence_transformers import SentenceTransformer

    m = SentenceTransformer(str(minilm_path), device="cpu")
    tok = TextTokenizer(str(minilm_path / "tokenizer.json"), 256, 0)
    for p in ("query: ", "Instruct: Given a web search query, retrieve relevant passages\nQuery:", "x"):
        assert prompt_length(tok.tok, p) == m[0]._get_prompt_length(p)
    assert prompt_length(tok.tok, "") == 0


def test_truncation_sides_equal_the_hf_tokenizer(minilm_path, corpus):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(minilm_path))
    tok = TextTokenizer(str(minilm_path / "tokenizer.json"), 32, 0)
    texts = [t for t in corpus if len(t) > 300][:5] + ["short one"]
    modes = ["START", "END", None, "START", "NONE", "START"]
    enc = tok.encode_mixed(texts, modes)
    for i, (t, m) in enumerate(zip(texts, modes, strict=True)):
        if m == "NONE":
            assert len(enc.ids[i]) == 33  # one token over: refused by the caller
            continue
        hf.truncation_side = "left" if m == "START" else "right"
        assert enc.ids[i] == hf(t, truncation=True, max_length=32)["input_ids"]


def test_exclude_prefix_zeroes_each_rows_prompt_positions_and_copies():
    from embtrt_backend.pooling import exclude_prefix

    mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], dtype=np.int64)
    assert exclude_prefix(mask, 0) is mask
    assert exclude_prefix(mask, 2).tolist() == [[0, 0, 1, 1, 0], [0, 0, 1, 0, 0]]
    assert exclude_prefix(mask, np.array([1, 3])).tolist() == [[0, 1, 1, 1, 0], [0, 0, 0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]] and exclude_prefix(mask, 1).dtype == mask.dtype


def test_resolved_options_name_the_prompt_to_pass_on_even_an_empty_one():
    """The gateway passes a request's options to the front door by name (#50: resolved once, never
    re-derived): the name it passes resolves there to the same options, an empty prompt's too (a
    model whose default prompt is not empty, asked for its empty one)."""
    o = _opts()
    for raw in ({}, {"input_type": "passage"}, {"prompt_name": "document"}, {"prompt_name": "query"},
                {"input_type": "query", "dimensions": 4}):
        opts = o.resolve(raw)
        again = o.resolve({k: v for k, v in (("prompt_name", opts.prompt_choice), ("dimensions", opts.dimensions))
                           if v is not None})
        assert again == opts, raw
    assert o.resolve({"input_type": "passage"}).prompt_choice == "document"
    assert _opts(default_prompt_name=None).resolve({}).prompt_choice is None
