"""The gateway asks a model's kind what it serves (#50): a model named on a route of an operation its
kind does not serve is a 400 naming the routes that serve it; a kind serving several operations (as
bge-m3 will: dense, sparse, token vectors) is served on each one's routes with no new route code."""

from dataclasses import replace

import pytest
from embtrt_backend.kinds import EMBEDDER, RERANKER, SPARSE

from embtrt.scale.gateway.errors import ApiError
from embtrt.scale.gateway.errors import refuse_other_kind

HYBRID = replace(SPARSE, name="hybrid", label="a hybrid encoder", operations=("embed", "embed_sparse"))


def test_a_model_of_another_kind_is_refused_with_the_routes_that_serve_it():
    with pytest.raises(ApiError) as e:
        refuse_other_kind("ce", {"ce": RERANKER}, EMBEDDER)
    assert e.value.status == 400 and e.value.code == "wrong_model_kind" and e.value.param == "model"
    assert e.value.message == ("'ce' is a reranker, not an embedder: POST /v1/rerank (Cohere, Jina, vLLM), /v2/rerank, "
                               "/rerank (TEI) or /v1/ranking (NIM) serves it")


def test_a_kind_serving_several_operations_is_served_on_each_and_refused_elsewhere():
    kinds = {"m3": HYBRID, "emb": EMBEDDER}
    refuse_other_kind("m3", kinds, EMBEDDER)    # embed: served
    refuse_other_kind("m3", kinds, SPARSE)      # embed_sparse: served
    refuse_other_kind("emb", kinds, EMBEDDER)
    refuse_other_kind("unknown", kinds, RERANKER)   # not this check's to refuse: the route's 404 names the models
    with pytest.raises(ApiError, match="'m3' is a hybrid encoder, not a reranker"):
        refuse_other_kind("m3", kinds, RERANKER)
