"""Inputs come from the model, not from the tokenizer: a BERT-style tokenizer (it emits
token_type_ids) on a tiny Qwen3 decoder (it does not take them), last-token pooling, left
padding. sentence-transformers embeds this folder; so must the built repository."""

import json

import pytest

from embtrt.errors import ModelError
from embtrt.reference.modelinfo import resolve_input_names

pytestmark = pytest.mark.integration


def test_token_type_ids_the_model_does_not_take_are_not_fed_and_vectors_equal_sentence_transformers(tmp_path, corpus):
    from sentence_transformers import SentenceTransformer
    from tiny_models import make_qwen3_bert_tokenizer

    from conftest import start_server
    from embtrt.export import build
    from embtrt.serve.client import EmbeddingClient
    from embtrt.reference.parity import cosine_rows
    from embtrt.export.spec_options import spec_from_options

    model = make_qwen3_bert_tokenizer(tmp_path / "qwen3-bert-tok")
    from transformers import AutoTokenizer

    assert "token_type_ids" in AutoTokenizer.from_pretrained(str(model)).model_input_names  # the mismatch is real
    repo = tmp_path / "repo"
    res = build(spec_from_options(model, repo, name="qb"), log=lambda m: None)
    m = res.manifest
    assert m["input_names"] == ["input_ids", "attention_mask"] and m["pooling"] == "last-token"
    assert m["parity"]["passed"]
    tok_cfg = (repo / "qb_32_tokenizer" / "config.pbtxt").read_text()
    assert "token_type_ids" not in tok_cfg and "token_type_ids" not in (repo / "qb_32_encoder" / "config.pbtxt").read_text()
    texts = corpus[::4]
    want = SentenceTransformer(str(model), device="cpu").encode(texts, batch_size=16, convert_to_numpy=True)
    from parity_helpers import assert_apart

    assert_apart(want, "qwen3 with a BERT tokenizer")   # texts apart: the row checks below can fail
    with start_server(repo, tmp_path) as srv:
        with EmbeddingClient(srv.grpc_url, "qb") as c:
            got = c.embed(texts)
        short = [t for t in texts if len(t) < 60][:10]
        with EmbeddingClient(srv.grpc_url, "qb_96") as c:
            got96 = c.embed(short)
    assert cosine_rows(want, got).min() >= 0.9999
    want96 = SentenceTransformer(str(model), device="cpu").encode(short, convert_to_numpy=True)
    assert cosine_rows(want96, got96).min() >= 0.9999
    assert json.loads((repo / "embtrt.json").read_text())["spec"]["input_names"] == ["input_ids", "attention_mask"]


def test_an_input_the_model_needs_and_the_tokenizer_lacks_is_a_clear_error():
    class NeedsPixels:
        def forward(self, input_ids, attention_mask=None, pixel_values=None, *, bbox, **kwargs):
            pass

    with pytest.raises(ModelError) as ei:
        resolve_input_names(("input_ids", "attention_mask"), NeedsPixels.forward, "layoutish")
    msg = ei.value.message
    assert "layoutish needs the input(s) bbox, which its tokenizer does not produce" in msg
    assert "the tokenizer gives input_ids, attention_mask" in msg and "pixel_values" in msg
    decoder_forward = lambda self, input_ids=None, attention_mask=None, **kwargs: None  # noqa: E731
    assert resolve_input_names(("input_ids", "token_type_ids", "attention_mask"), decoder_forward) == \
        ["input_ids", "attention_mask"]
