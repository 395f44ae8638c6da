"""The gateway's parsers with a page-image retriever beside text models (#70), without a server: a model whose input
takes images takes vLLM's image documents and /pooling `messages`; a text model refuses them (wrong_modality); a text
sent to the page model as a document is refused (its documents are images); a kind that does not serve an operation
is a 400 naming the routes that serve it, not a 404."""

from types import SimpleNamespace

import pytest
from embtrt_backend.kinds import MULTIVECTOR, PAGES, RERANKER

from embtrt.kinds.pages.scale import PagesModel
from embtrt.scale.gateway.dialects.cohere import parse_rank
from embtrt.scale.gateway.ops.rank import RerankModel
from embtrt.scale.gateway.errors import ApiError
from embtrt.scale.gateway.operations import operations

# the operations' rows, as the gateway's handler calls them: each route's body parsed by its dialect's shape
parse_tokens, parse_encode = operations()["token_vectors"].parse, operations()["encode"].parse

CFG = SimpleNamespace(default_model=None, max_items=64)
KINDS = {"pages": PAGES, "colbert": MULTIVECTOR, "ce": RERANKER}
PAGE = PagesModel(dim=16, max_text_bytes=1 << 24)
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def _refused(fn, *args, said: str, code: str | None = None) -> ApiError:
    with pytest.raises(ApiError) as e:
        fn(*args)
    assert e.value.status == 400 and said in e.value.message, e.value.message
    if code is not None:
        assert e.value.code == code
    return e.value


def test_pooling_messages_are_an_image_for_a_model_that_takes_images_only():
    models = {"pages": PAGE, "colbert": object()}
    req = parse_tokens(models, KINDS, CFG, "/pooling", {"model": "pages", "messages": [{"role": "user", "content": [IMAGE]}]})
    assert req.images == (IMAGE["image_url"]["url"],) and req.texts == []
    _refused(parse_tokens, models, KINDS, CFG, "/pooling", {"model": "colbert", "messages": [{"role": "user", "content": [IMAGE]}]},
             said="it takes texts in input", code="wrong_modality")
    _refused(parse_tokens, models, KINDS, CFG, "/pooling", {"model": "pages", "input": ["q"],
                                                           "messages": [{"role": "user", "content": [IMAGE]}]},
             said="not both")
    _refused(parse_tokens, models, KINDS, CFG, "/pooling", {"model": "pages", "messages": [{"role": "user", "content": [
        IMAGE, IMAGE]}]}, said="one image_url part")


def test_a_text_is_a_query_for_the_page_model_and_a_document_is_refused():
    models = {"pages": PAGE}
    assert parse_tokens(models, KINDS, CFG, "/embed_all", {"inputs": ["q"]}).texts == ["q"]
    assert parse_tokens(models, KINDS, CFG, "/embed_all", {"inputs": ["q"], "input_type": "query"}).side == "query"
    _refused(parse_tokens, models, KINDS, CFG, "/embed_all", {"inputs": ["q"], "input_type": "document"}, said="a text is a query")
    _refused(parse_tokens, models, KINDS, CFG, "/pooling", {"model": "pages", "input": ["q"], "embedding_mode": "passage"},
             said="a text is a query")


def test_encode_naming_the_page_model_is_a_400_naming_its_routes():
    e = _refused(parse_encode, {"colbert": SimpleNamespace(layout="colbert")}, KINDS, CFG, "/v1/encode",
                 {"model": "pages", "input": "x"}, said="'pages' is a page-image retriever", code="wrong_model_kind")
    assert "/embed_all" in e.message


def test_vllm_image_documents_rank_on_the_page_model_and_a_text_reranker_refuses_them():
    models = {"pages": PAGE, "ce": RerankModel(num_labels=1, max_text_bytes=1 << 20)}
    body = {"query": "q", "documents": {"content": [IMAGE, IMAGE]}}
    req = parse_rank({**body, "model": "pages"}, models, KINDS, 64)
    assert req.documents == [IMAGE["image_url"]["url"]] * 2
    _refused(parse_rank, {**body, "model": "ce"}, models, KINDS, 64, said="it ranks text documents",
             code="wrong_modality")
    _refused(parse_rank, {"model": "pages", "query": "q", "documents": {"content": [{"type": "text", "text": "a"}]}},
             models, KINDS, 64, said="documents.content[0] must be an image_url part")
    _refused(parse_rank, {"model": "pages", "query": "q", "documents": {"content": [IMAGE] * 65}}, models, KINDS, 64,
             said="has 65 items; at most 64")
