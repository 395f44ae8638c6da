"""The gateway's sparse routes' schema on its own (scale/gateway/dialects: tei, embtrt): TEI's
/embed_sparse and /v1/sparse bodies parsed into one SparseRequest, each bad body refused with its own
status, message and param, and the vectors rendered in each shape, without a server. The same routes
through the real gateway: tests/integration/test_gateway_sparse.py."""

import numpy as np
import pytest
from embtrt_backend.kinds import EMBEDDER, RERANKER, SPARSE
from embtrt_backend.options import ModelOptions

from embtrt.scale.gateway.dialects.openai import parse_embeddings
from embtrt.scale.gateway.dialects.cohere import parse_rank
from embtrt.scale.gateway.errors import ApiError
from embtrt.scale.gateway.dialects import embtrt, tei
from embtrt.scale.gateway.ops.sparse import SparseModel, SparseRequest

DIALECTS = {"tei": tei, "embtrt": embtrt}


def parse_sparse(api: str, body, models, max_items: int, kinds):
    return DIALECTS[api].parse_sparse(body, models, kinds, max_items)


def render(req, rows, tokens: int, token_of=None):
    return DIALECTS[req.api].render_sparse(req, rows, tokens, token_of)

MAX_BYTES = 16
MODELS = {"sp": SparseModel(ModelOptions(dim=100, normalize=False, prompts={"query": "query: ", "document": ""}),
                            MAX_BYTES)}
KINDS = {"emb": EMBEDDER, "rr": RERANKER, "sp": SPARSE}   # the gateway's kinds by model name


def _parse(api: str, body, models=None, max_items: int = 4) -> SparseRequest:
    return parse_sparse(api, body, MODELS if models is None else models, max_items, KINDS)


def _refused(api: str, body, status: int, message: str, param: str | None, models=None) -> ApiError:
    with pytest.raises(ApiError) as info:
        _parse(api, body, models)
    err = info.value
    assert (err.status, err.message, err.param) == (status, message, param)
    return err


# ---- good bodies ------------------------------------------------------------------------------

def test_tei_takes_no_model_while_one_sparse_encoder_is_served_and_truncates_at_the_end_by_default():
    r = _parse("tei", {"inputs": "hello"})
    assert (r.api, r.model, r.served, r.texts, r.parameters) == ("tei", None, "sp", ["hello"], {"truncate": "END"})
    assert r.options.truncate == "END" and r.options.prompt == "" and r.max_active_dims is None
    assert _parse("tei", {"model": "sp", "inputs": ["a", ""]}).texts == ["a", ""]   # an empty string is a text


def test_tei_truncate_false_is_none_and_left_is_start():
    assert _parse("tei", {"inputs": "a", "truncate": False}).parameters == {"truncate": "NONE"}
    assert _parse("tei", {"inputs": "a", "truncation_direction": "Left"}).parameters == {"truncate": "START"}
    assert _parse("tei", {"inputs": "a", "truncate": False, "truncation_direction": "left"}).parameters == \
        {"truncate": "NONE"}
    r = _parse("tei", {"inputs": "a", "prompt_name": "query"})
    assert r.parameters == {"truncate": "END", "prompt_name": "query"} and r.options.prompt == "query: "


def test_v1_sparse_maps_input_type_onto_the_prompts_and_passes_the_parameters_on():
    q = _parse("embtrt", {"model": "sp", "input": ["a", "b"], "input_type": "query", "max_active_dims": 3,
                          "truncate": "start", "encoding_format": "float", "user": "ignored"})
    assert (q.model, q.texts, q.options.prompt, q.options.truncate, q.max_active_dims) == \
        ("sp", ["a", "b"], "query: ", "START", 3)
    assert q.parameters == {"input_type": "query", "max_active_dims": 3, "truncate": "START"}
    assert _parse("embtrt", {"model": "sp", "input": "a", "input_type": "passage"}).options.prompt == ""
    assert _parse("embtrt", {"model": "sp", "input": "a"}).parameters == {}


# ---- refusals ---------------------------------------------------------------------------------

@pytest.mark.parametrize("api, body, message, param", [
    ("embtrt", {"input": "a"}, "you must provide a model parameter", "model"),
    ("embtrt", {"model": 3, "input": "a"}, "model must be a string", "model"),
    ("embtrt", {"model": "sp"}, "you must provide an input parameter", "input"),
    ("embtrt", {"model": "sp", "input": []}, "input must be a string or a non-empty list of strings", "input"),
    ("embtrt", {"model": "sp", "input": 5}, "input must be a string or a non-empty list of strings", "input"),
    ("embtrt", {"model": "sp", "input": ["a", [1, 2]]}, "input[1] must be a string, got [1, 2]", "input"),
    ("embtrt", {"model": "sp", "input": ["a"] * 5}, "input has 5 items; at most 4 per request", "input"),
    ("embtrt", {"model": "sp", "input": ["a", "x" * 17]}, "input[1] is 17 bytes of UTF-8, over the limit of 16 bytes "
     "per text", "input"),
    ("embtrt", {"model": "sp", "input": "a", "input_type": "title"},
     "invalid input_type 'title': allowed query, passage, document", "input_type"),
    ("embtrt", {"model": "sp", "input": "a", "max_active_dims": 0},
     "invalid max_active_dims 0: must be an integer >= 1", "max_active_dims"),
    ("embtrt", {"model": "sp", "input": "a", "max_active_dims": True},
     "invalid max_active_dims True: must be an integer >= 1", "max_active_dims"),
    ("embtrt", {"model": "sp", "input": "a", "max_active_dims": "8"},
     "invalid max_active_dims '8': must be an integer >= 1", "max_active_dims"),
    ("embtrt", {"model": "sp", "input": "a", "truncate": "MIDDLE"}, "invalid truncate 'MIDDLE': allowed END, START, NONE",
     "truncate"),
    ("embtrt", {"model": "sp", "input": "a", "prompt_name": "code"},
     "unknown prompt_name 'code': this model's prompts are document, query", "prompt_name"),
    ("tei", {"inputs": "a", "truncate": "yes"}, "truncate must be true or false, got 'yes'", "truncate"),
    ("tei", {"inputs": "a", "truncation_direction": "up"}, "truncation_direction must be 'right' or 'left', not 'up'",
     "truncation_direction"),
    ("tei", {"texts": ["a"]}, "you must provide an inputs parameter", "inputs"),
    ("tei", {"inputs": [{"text": "a"}]}, "inputs[0] must be a string, got {'text': 'a'}", "inputs"),
])
def test_bad_bodies_are_400_naming_the_field(api, body, message, param):
    _refused(api, body, 400, message, param)


def test_dimensions_and_embedding_type_do_not_apply_to_a_sparse_encoder():
    for key, value in (("dimensions", 8), ("embedding_type", "int8")):
        err = _refused("embtrt", {"model": "sp", "input": "a", key: value}, 400,
                       f"{key} does not apply to a sparse encoder (its output is one weight per vocabulary token; "
                       "max_active_dims keeps the largest K)", key)
        assert err.code is None


def test_an_unknown_model_is_404_and_the_other_kinds_are_400_naming_their_routes():
    err = _refused("embtrt", {"model": "nope", "input": "a"}, 404,
                   "the model 'nope' does not exist; this gateway encodes sparse vectors with 'sp'", "model")
    assert err.code == "model_not_found"
    err = _refused("tei", {"model": "emb", "inputs": "a"}, 400,
                   "'emb' is an embedder, not a sparse encoder: POST /v1/embeddings serves it", "model")
    assert err.code == "wrong_model_kind"
    _refused("embtrt", {"model": "rr", "input": "a"}, 400, "'rr' is a reranker, not a sparse encoder: POST /v1/rerank "
             "(Cohere, Jina, vLLM), /v2/rerank, /rerank (TEI) or /v1/ranking (NIM) serves it", "model")
    two = {**MODELS, "sp2": MODELS["sp"]}
    _refused("tei", {"inputs": "a"}, 400, "you must provide a model parameter (this gateway serves several sparse "
             "encoders: 'sp', 'sp2')", "model", models=two)
    _refused("tei", {"inputs": "a"}, 404, "this gateway serves no sparse encoder", "model", models={})
    _refused("embtrt", ["a"], 400, "the request body must be a JSON object", None)


def test_the_embeddings_and_rerank_schemas_refuse_a_sparse_encoder_naming_the_sparse_routes():
    message = "'sp' is a sparse encoder, not {}: POST /v1/sparse or /embed_sparse (TEI) serves it"
    with pytest.raises(ApiError) as info:
        parse_embeddings({"model": "sp", "input": "a"}, {}, 4, {"sp": SPARSE})
    assert (info.value.status, info.value.message, info.value.code) == (400, message.format("an embedder"),
                                                                         "wrong_model_kind")
    with pytest.raises(ApiError) as info:
        parse_rank({"model": "sp", "query": "q", "documents": ["a"]}, {}, {"sp": SPARSE}, 4)
    assert (info.value.status, info.value.message) == (400, message.format("a reranker"))


# ---- rendering --------------------------------------------------------------------------------

ROWS = [(np.array([3, 7], np.int64), np.array([0.5, 1.25], np.float32)),
        (np.array([], np.int64), np.array([], np.float32)),
        (np.array([1], np.int64), np.array([2.0], np.float32))]


def test_tei_renders_one_list_of_index_value_per_input_and_the_tokens_in_a_header():
    doc, headers = render(_parse("tei", {"inputs": ["a", "b", "c"]}), ROWS, 11)
    assert doc == [[{"index": 3, "value": 0.5}, {"index": 7, "value": 1.25}], [], [{"index": 1, "value": 2.0}]]
    assert headers == [(b"x-compute-tokens", b"11"), (b"x-compute-characters", b"3")]


def test_v1_sparse_renders_indices_values_and_usage():
    doc, headers = render(_parse("embtrt", {"model": "sp", "input": ["a", "b", "c"]}), ROWS, 11)
    assert doc == {"object": "list", "model": "sp", "usage": {"prompt_tokens": 11, "total_tokens": 11}, "data": [
        {"object": "sparse_embedding", "index": 0, "indices": [3, 7], "values": [0.5, 1.25]},
        {"object": "sparse_embedding", "index": 1, "indices": [], "values": []},
        {"object": "sparse_embedding", "index": 2, "indices": [1], "values": [2.0]}]}
    assert headers == []
    assert all(type(i) is int for i in doc["data"][0]["indices"]) and all(type(v) is float for v in doc["data"][0]["values"])


def test_v1_sparse_return_tokens_names_each_index_and_tei_has_no_such_field():
    req = _parse("embtrt", {"model": "sp", "input": ["a", "b", "c"], "return_tokens": True})
    assert req.return_tokens and "return_tokens" not in req.parameters   # the gateway's own field, not upstream
    doc, _ = render(req, ROWS, 11, token_of=lambda i: f"tok{i}")
    assert [d["tokens"] for d in doc["data"]] == [["tok3", "tok7"], [], ["tok1"]]
    assert not _parse("tei", {"inputs": "a", "return_tokens": True}).return_tokens   # TEI's shape has none
    _refused("embtrt", {"model": "sp", "input": "a", "return_tokens": 1}, 400, "return_tokens must be true or false, got 1",
             "return_tokens")
