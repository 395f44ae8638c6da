"""A client pointed at a model of another kind is refused with the client that model takes (#68 item 6: the
embedder's client told every non-embedder to "rank with RerankClient")."""

import pytest

from embtrt.errors import ClientError
from embtrt.serve.client import EmbeddingClient

pytestmark = pytest.mark.integration


def test_the_embedding_client_on_a_classifier_names_the_classifiers_client(classifier_server):
    with EmbeddingClient(classifier_server.grpc_url, "bert_cls3") as c, pytest.raises(ClientError) as e:
        c.embed(["a text"])
    assert "is a classifier, not an embedder" in e.value.message
    assert "ClassifyClient" in e.value.hint and "RerankClient" not in e.value.hint


def test_the_rerank_client_on_an_embedder_names_the_embedding_client(minilm_server):
    from embtrt.kinds.reranker.serve import RerankClient

    with RerankClient(minilm_server.grpc_url, "all_minilm_l6_v2") as c, pytest.raises(ClientError) as e:
        c.rerank("q", ["d"])
    assert "is not a reranker (kind embedder)" in e.value.message
    assert "EmbeddingClient" in e.value.hint and "RerankClient" not in e.value.hint
