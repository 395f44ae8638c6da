"""The gateway's rerank shapes on their own (scale/gateway/dialects: cohere, tei, nim): the three API shapes
(Cohere / Jina / vLLM, TEI, NIM) parsed into one RerankRequest, each bad body refused with its own
status, message and field, and scores rendered in each shape, sorted, without a server. The same
routes through a real gateway and tritonserver: tests/integration/test_gateway_rerank.py."""

import numpy as np
import pytest
from embtrt_backend.kinds import EMBEDDER

from embtrt.scale.gateway.dialects import cohere, nim, tei
from embtrt.scale.gateway.errors import ApiError
from embtrt.scale.gateway.ops.rank import RerankModel

DIALECTS = {"cohere": cohere, "tei": tei, "nim": nim}


def parse_rerank(api: str, body, models, kinds, max_items: int):
    return DIALECTS[api].parse_rank(body, models, kinds, max_items)


def render(req, scores, tokens: int):
    """The response in the request's own shape (its `api`: vLLM's body on /rerank answers as Cohere's)."""
    return DIALECTS[req.api].render_rank(req, scores, tokens)

MODELS = {"ce": RerankModel(num_labels=1, max_text_bytes=64), "ce3": RerankModel(num_labels=3, max_text_bytes=64)}
EMBEDDERS = {"emb": EMBEDDER}   # the gateway's other models' kinds by name


def _parse(api: str, body, models=None, max_items: int = 4):
    return parse_rerank(api, body, models or MODELS, EMBEDDERS, max_items)


def _refused(api: str, body, status: int, message: str, param: str | None, models=None) -> ApiError:
    with pytest.raises(ApiError) as info:
        _parse(api, body, models)
    err = info.value
    assert (err.status, err.message, err.param) == (status, message, param)
    return err


# ---- good bodies ------------------------------------------------------------------------------

def test_cohere_documents_as_strings_or_text_objects_keep_their_order_and_defaults():
    r = _parse("cohere", {"model": "ce", "query": "q", "documents": ["b", {"text": "a"}, ""], "max_chunks_per_doc": 3})
    assert (r.api, r.model, r.served, r.query, r.documents) == ("cohere", "ce", "ce", "q", ["b", "a", ""])
    assert (r.top_n, r.return_documents, r.activation, r.truncate, r.truncation_direction) == \
        (None, True, "default", True, "right")
    r = _parse("cohere", {"model": "ce", "query": "q", "documents": ["x"], "top_n": 9, "return_documents": False})
    assert (r.top_n, r.return_documents) == (9, False)
    # vLLM: top_n 0 (its default) is every document; use_activation false gives the raw logits
    r = _parse("cohere", {"model": "ce", "query": "q", "documents": ["x"], "top_n": 0, "use_activation": False})
    assert (r.top_n, r.activation) == (None, "raw")
    assert _parse("cohere", {"model": "ce", "query": "q", "documents": ["x"], "use_activation": True}).activation == "default"


def test_a_vllm_body_on_tei_s_route_is_the_cohere_shape_with_the_model_optional():
    r = _parse("tei", {"query": "q", "documents": ["a", {"text": "b"}], "top_n": 1}, models={"ce": MODELS["ce"]})
    assert (r.api, r.served, r.model, r.documents, r.top_n, r.return_documents) == \
        ("cohere", "ce", None, ["a", "b"], 1, True)
    doc, headers = render(r, np.array([0.5, 0.75], dtype=np.float32), 9)
    assert doc["results"] == [{"index": 1, "relevance_score": 0.75, "document": {"text": "b"}}] and headers == []
    assert doc["usage"] == {"prompt_tokens": 9, "total_tokens": 9} and doc["model"] == "ce"  # the served name, unasked
    assert _parse("tei", {"query": "q", "texts": None, "documents": ["a"]}, models={"ce": MODELS["ce"]}).api == "cohere"
    # vLLM's older `activation` flag is use_activation's alias
    assert _parse("cohere", {"model": "ce", "query": "q", "documents": ["x"], "activation": False}).activation == "raw"
    # TEI's body keeps TEI's shape; a body with both fields is TEI's (texts), with neither refused as TEI's
    assert _parse("tei", {"query": "q", "texts": ["a"], "documents": ["b"]}, models={"ce": MODELS["ce"]}).api == "tei"
    _refused("tei", {"query": "q"}, 400, "you must provide a texts parameter", "texts", models={"ce": MODELS["ce"]})
    _refused("tei", {"model": "ce", "query": "q", "documents": ["a"], "top_n": -1}, 400,
             "top_n must be 0 (every document) or more, got -1", "top_n")


def test_tei_raw_scores_is_the_raw_activation_and_the_model_is_optional_with_one_reranker():
    r = _parse("tei", {"query": "q", "texts": ["a", "b"], "raw_scores": True, "return_text": True, "truncate": False,
                       "truncation_direction": "Left"}, models={"ce": MODELS["ce"]})
    assert (r.served, r.model, r.documents, r.activation, r.return_documents, r.truncate, r.truncation_direction) == \
        ("ce", None, ["a", "b"], "raw", True, False, "left")
    assert _parse("tei", {"query": "q", "texts": ["a"]}, models={"ce": MODELS["ce"]}).activation == "default"


def test_nim_logits_are_raw_and_truncate_end_cuts_none_refuses():
    r = _parse("nim", {"model": "ce", "query": {"text": "q"}, "passages": [{"text": "a"}, {"text": "b"}]})
    assert (r.query, r.documents, r.activation, r.truncate) == ("q", ["a", "b"], "raw", False)
    assert _parse("nim", {"model": "ce", "query": {"text": "q"}, "passages": [{"text": "a"}], "truncate": "END"}).truncate


# ---- refused bodies ---------------------------------------------------------------------------

def test_model_missing_unknown_an_embedder_or_a_classifier_is_refused_naming_it():
    _refused("cohere", {"query": "q", "documents": ["a"]}, 400, "you must provide a model parameter", "model")
    _refused("cohere", {"model": 3, "query": "q", "documents": ["a"]}, 400, "model must be a string", "model")
    err = _refused("cohere", {"model": "nope", "query": "q", "documents": ["a"]}, 404,
                   "the model 'nope' does not exist; this gateway reranks with 'ce', 'ce3'", "model")
    assert err.code == "model_not_found"
    err = _refused("nim", {"model": "emb", "query": {"text": "q"}, "passages": [{"text": "a"}]}, 400,
                   "'emb' is an embedder, not a reranker: POST /v1/embeddings serves it", "model")
    assert err.code == "wrong_model_kind"
    _refused("cohere", {"model": "ce3", "query": "q", "documents": ["a"]}, 400,
             "'ce3' has 3 labels (a classifier, not a ranker): the rerank APIs take a model of one label, whose one "
             "score orders the documents", "model")
    _refused("tei", {"query": "q", "texts": ["a"]}, 400,
             "you must provide a model parameter (this gateway serves several rerankers: 'ce', 'ce3')", "model")


def test_bad_query_documents_and_options_are_refused_naming_the_field():
    def cohere(**kw):
        return {"model": "ce", "query": "q", "documents": ["a"], **kw}

    _refused("cohere", {"model": "ce", "documents": ["a"]}, 400, "you must provide a query parameter", "query")
    _refused("cohere", cohere(query=""), 400, "query must be a non-empty string", "query")
    _refused("cohere", cohere(query=["q"]), 400, "query must be a non-empty string", "query")
    _refused("cohere", cohere(documents=[]), 400, "documents must be a non-empty list", "documents")
    _refused("cohere", cohere(documents="a"), 400, "documents must be a non-empty list", "documents")
    _refused("cohere", {"model": "ce", "query": "q"}, 400, "you must provide a documents parameter", "documents")
    _refused("cohere", cohere(documents=["a", 5]), 400,
             'documents[1] must be a string or an object {"text": "..."}, got 5', "documents")
    _refused("cohere", cohere(documents=[{"title": "a"}]), 400,
             "documents[0] must be a string or an object {\"text\": \"...\"}, got {'title': 'a'}", "documents")
    _refused("cohere", cohere(documents=["a"] * 5), 400, "documents has 5 items; at most 4 per request", "documents")
    _refused("cohere", cohere(top_n="2"), 400, "top_n must be an integer, got '2'", "top_n")
    _refused("cohere", cohere(top_n=1.5), 400, "top_n must be an integer, got 1.5", "top_n")
    _refused("cohere", cohere(top_n=True), 400, "top_n must be an integer, got True", "top_n")
    _refused("cohere", cohere(top_n=-1), 400, "top_n must be 0 (every document) or more, got -1", "top_n")
    _refused("cohere", cohere(use_activation="no"), 400, "use_activation must be true or false, got 'no'",
             "use_activation")
    _refused("cohere", cohere(return_documents="yes"), 400, "return_documents must be true or false, got 'yes'",
             "return_documents")
    _refused("cohere", cohere(documents=["é" * 40]), 400, "documents[0] is 80 bytes of UTF-8, over the limit of 64 "
             "bytes per text", "documents")
    _refused("cohere", [1], 400, "the request body must be a JSON object", None)


def test_tei_and_nim_shapes_refuse_what_their_apis_do_not_take():
    _refused("tei", {"model": "ce", "query": "q", "texts": [{"text": "a"}]}, 400,
             "texts[0] must be a string, got {'text': 'a'}", "texts")
    _refused("tei", {"model": "ce", "query": "q", "texts": ["a"], "truncation_direction": "up"}, 400,
             "truncation_direction must be 'right' or 'left', not 'up'", "truncation_direction")
    _refused("tei", {"model": "ce", "query": "q", "texts": ["a"], "raw_scores": 1}, 400,
             "raw_scores must be true or false, got 1", "raw_scores")
    _refused("nim", {"model": "ce", "query": "q", "passages": [{"text": "a"}]}, 400,
             'query must be an object {"text": "..."}', "query")
    _refused("nim", {"model": "ce", "query": {"text": ""}, "passages": [{"text": "a"}]}, 400,
             "query.text must be a non-empty string", "query.text")
    _refused("nim", {"model": "ce", "query": {"text": "q"}, "passages": ["a"]}, 400,
             "passages[0] must be an object {\"text\": \"...\"}, got 'a'", "passages")
    _refused("nim", {"model": "ce", "query": {"text": "q"}, "passages": [{"text": "a"}], "truncate": "START"}, 400,
             "truncate must be 'NONE' or 'END', not 'START'", "truncate")


# ---- rendering --------------------------------------------------------------------------------

SCORES = np.array([0.25, 0.75, 0.25, 0.5], dtype=np.float32)  # a tie: input order among equals


def test_each_shape_is_sorted_by_score_with_ties_in_input_order_and_reports_usage():
    docs = ["a", "b", "c", "d"]
    cohere = _parse("cohere", {"model": "ce", "query": "q", "documents": docs, "return_documents": True})
    doc, headers = render(cohere, SCORES, 17)
    assert [r["index"] for r in doc["results"]] == [1, 3, 0, 2]
    assert [r["relevance_score"] for r in doc["results"]] == [0.75, 0.5, 0.25, 0.25]
    assert [r["document"]["text"] for r in doc["results"]] == ["b", "d", "a", "c"]
    assert doc["usage"] == {"prompt_tokens": 17, "total_tokens": 17} and doc["model"] == "ce" and doc["id"]
    assert headers == []
    tei = _parse("tei", {"model": "ce", "query": "q", "texts": docs})
    doc, headers = render(tei, SCORES, 17)
    assert doc == [{"index": 1, "score": 0.75}, {"index": 3, "score": 0.5}, {"index": 0, "score": 0.25},
                   {"index": 2, "score": 0.25}]
    # TEI's headers: the tokens, and the characters (the query counted once per text, as TEI does)
    assert headers == [(b"x-compute-tokens", b"17"), (b"x-compute-characters", b"8")]
    nim = _parse("nim", {"model": "ce", "query": {"text": "q"}, "passages": [{"text": t} for t in docs]})
    doc, _ = render(nim, SCORES, 17)
    assert doc == {"rankings": [{"index": 1, "logit": 0.75}, {"index": 3, "logit": 0.5}, {"index": 0, "logit": 0.25},
                                {"index": 2, "logit": 0.25}], "usage": {"prompt_tokens": 17, "total_tokens": 17}}


def test_top_n_keeps_the_best_and_over_the_count_keeps_all():
    docs = ["a", "b", "c", "d"]
    two = render(_parse("cohere", {"model": "ce", "query": "q", "documents": docs, "top_n": 2,
                                   "return_documents": False}), SCORES, 1)[0]
    assert [r["index"] for r in two["results"]] == [1, 3] and "document" not in two["results"][0]
    many = render(_parse("cohere", {"model": "ce", "query": "q", "documents": docs, "top_n": 99}), SCORES, 1)[0]
    assert [r["index"] for r in many["results"]] == [1, 3, 0, 2]


@pytest.mark.parametrize("given", ["right", "LEFT", "Left", "up", "", 1, None, ["left"]])
def test_the_gateway_and_the_front_door_take_the_same_truncation_directions(given):
    """One rule (embtrt_backend.pairs.truncation_direction) behind TEI's body and the front door's
    request parameter: a direction one takes the other takes, as the same value; each refuses in its words."""
    from embtrt_backend import InputError
    from embtrt_backend.pairs import PairOptions

    try:
        door = PairOptions.parse({"truncation_direction": given}).direction
    except InputError:
        door = None
    try:
        gateway = _parse("tei", {"model": "ce", "query": "q", "texts": ["a"], "truncation_direction": given}).truncation_direction
    except ApiError as exc:
        assert exc.param == "truncation_direction"
        gateway = None
    assert gateway == door and (door is None) == (not isinstance(given, str) or given.lower() not in ("right", "left"))
