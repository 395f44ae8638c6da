"""The reranker's pair core without Triton: options, activations, and one bad request among good ones."""

from __future__ import annotations

import numpy as np
import pytest

from embtrt_backend import InputError
from embtrt_backend.pairs import PairConfig, PairCore, PairOptions, PairRequest, PairTokenizer, activate


def test_options_parse_and_refuse_with_the_field_named():
    assert PairOptions.parse({}) == PairOptions()
    assert PairOptions.parse({"activation": "raw", "truncate": "false", "truncation_direction": "LEFT"}) == \
        PairOptions("raw", False, "left")
    for params, field in (({"activation": "tanh"}, "activation"), ({"truncate": 3}, "truncate"),
                          ({"truncation_direction": "up"}, "truncation_direction"), ({"top_n": 3}, "top_n"),
                          ({"prompt_name": "x"}, "prompt_name")):
        with pytest.raises(InputError) as err:
            PairOptions.parse(params)
        assert err.value.param == field


def test_a_prompt_name_picks_the_models_prompt_and_the_default_applies():
    prompts = {"query": "Query: "}
    assert PairOptions.parse({"prompt_name": "query"}, prompts).prompt == "Query: "
    assert PairOptions.parse({}, prompts).prompt == ""                     # no default prompt: none
    assert PairOptions.parse({}, prompts, "query").prompt == "Query: "     # the model's default
    with pytest.raises(InputError, match="prompt_name 'doc': this model's prompts are query"):
        PairOptions.parse({"prompt_name": "doc"}, prompts)


def test_activations_are_cross_encoders():
    x = np.array([[0.0, 2.0, -1.0], [3.0, 3.0, 3.0]], np.float32)
    assert np.allclose(activate(x[:, :1], "default", "sigmoid"), 1 / (1 + np.exp(-x[:, :1])))
    assert np.array_equal(activate(x, "default", "identity"), x)
    assert np.array_equal(activate(x, "raw", "sigmoid"), x)
    soft = activate(x, "softmax", "identity")
    assert np.allclose(soft.sum(axis=1), 1) and np.allclose(soft[1], 1 / 3) and soft[0].argmax() == 1


def test_a_bad_request_fails_alone_and_rows_come_back_in_order(minilm_path):
    tok = PairTokenizer(str(minilm_path / "tokenizer.json"), 16, 0)
    core = PairCore(PairConfig(buckets=(8, 16), max_batch=(4, 4), input_names=("input_ids", "attention_mask"),
                               num_labels=1, activation="identity", run_overhead=0), tok)
    seen = []

    def encoder(bucket, feeds):   # a "score" that is the row's token count: order is checkable
        seen.append(bucket)
        return feeds["attention_mask"].sum(axis=1, keepdims=True).astype(np.float32)

    docs = ["a b c d e f g h i j k l m n o p q r s", "short", "two words"]
    out = core.run([PairRequest(["q"] * 3, docs), PairRequest(["q", "q"], ["x"]), PairRequest(["q"], ["y"])], encoder)
    assert isinstance(out[1].error, InputError) and "QUERY has 2 rows and DOCUMENT 1" in str(out[1].error)
    assert out[0].error is None and out[0].scores[:, 0].tolist() == out[0].tokens.tolist()
    assert out[0].tokens[0] == 16 and out[0].tokens[1] < out[0].tokens[0]   # longest_first cut at the max length
    assert out[2].scores.shape == (1, 1) and set(seen) == {8, 16}


def test_a_pair_of_no_tokens_is_its_requests_error_and_the_batch_is_served(minilm_path, tmp_path):
    """An empty query and document, with a tokenizer that adds no special tokens: no row to run, so that
    request's clear error (was the runtime's reshape error on a tiny Qwen3 reranker over gRPC)."""
    import json

    raw = json.loads((minilm_path / "tokenizer.json").read_text())
    raw["post_processor"] = None
    (tmp_path / "tokenizer.json").write_text(json.dumps(raw))
    core = PairCore(PairConfig(buckets=(8, 16), max_batch=(4, 4), input_names=("input_ids", "attention_mask"),
                               num_labels=1, activation="identity", run_overhead=0),
                    PairTokenizer(str(tmp_path / "tokenizer.json"), 16, 0))

    def encoder(bucket, feeds):
        assert feeds["attention_mask"].sum(axis=1).min() > 0   # never a row of no tokens
        return feeds["attention_mask"].sum(axis=1, keepdims=True).astype(np.float32)

    bad, ok = core.run([PairRequest(["q", ""], ["a doc", ""]), PairRequest(["", "q"], ["doc", ""])], encoder)
    assert isinstance(bad.error, InputError) and str(bad.error) == "row 1: the pair tokenizes to no tokens"
    assert ok.error is None and ok.tokens.tolist() == [1, 1]


def test_an_encoder_output_of_the_wrong_size_is_each_served_requests_error(minilm_path):
    """The logits reshaped per chunk inside the core's run: a wrong output fails the requests it served,
    a refused request keeps its own error, and nothing escapes to the caller."""
    tok = PairTokenizer(str(minilm_path / "tokenizer.json"), 16, 0)
    core = PairCore(PairConfig(buckets=(16,), max_batch=(4,), input_names=("input_ids", "attention_mask"),
                               num_labels=1, activation="identity", run_overhead=0), tok)
    out = core.run([PairRequest(["q", "q"], ["a", "b"]), PairRequest(["q"], [])],
                   lambda bucket, feeds: np.zeros(5, np.float32))
    assert out[0].error is not None and not isinstance(out[0].error, InputError) and out[0].scores is None
    assert isinstance(out[1].error, InputError)
