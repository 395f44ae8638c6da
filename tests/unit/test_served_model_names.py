"""#73: --served-model-name: clients with a hard-coded model name call the model by it. Parsing, and the
gateway's models answering to the names (the first reported, the others aliases; the own name not),
without a server: the bundled MiniLM's repository files are all the gateway reads."""

import pytest

from embtrt.errors import SpecError
from embtrt.scale.gateway.config import GatewayConfig, parse_served_names
from embtrt.scale.gateway.errors import ApiError
from embtrt.scale.gateway.registry import MultiGateway

NAME = "all_minilm_l6_v2"


def test_names_parse_for_one_model_and_for_one_of_several():
    assert parse_served_names(["text-embedding-3-small", "ada"], ["m"]) == (("m", ("text-embedding-3-small", "ada")),)
    assert parse_served_names(["b=BAAI/bge-small-en-v1.5"], ["a", "b"]) == (("b", ("BAAI/bge-small-en-v1.5",)),)
    with pytest.raises(SpecError, match="serves several models"):
        parse_served_names(["x"], ["a", "b"])
    with pytest.raises(SpecError, match="no model named 'c'"):
        parse_served_names(["c=x"], ["a", "b"])
    with pytest.raises(SpecError, match="a name of letters"):
        parse_served_names(["bad name"], ["a"])


def test_the_gateway_answers_to_the_served_names_only_and_reports_the_first(minilm_repo, tiny_repos):
    from embtrt.scale.gateway.dialects.openai import parse_embeddings

    cfg = GatewayConfig(repository=minilm_repo, triton="127.0.0.1:1",
                        served_names=(("all_minilm_l6_v2", ("text-embedding-3-small", "ada-002")),))
    gw = MultiGateway(cfg)
    assert list(gw.models) == ["text-embedding-3-small"]
    # the metrics' label of every name it answers to (an alias counts under the reported name)
    assert gw.reported == {"text-embedding-3-small": "text-embedding-3-small", "ada-002": "text-embedding-3-small"}
    schemas = gw.schemas["embed"]
    for name in ("text-embedding-3-small", "ada-002", "text-embedding-3-small-query"):
        req = parse_embeddings({"model": name, "input": "x"}, schemas, 8, gw.kinds)
        assert req.served in ("text-embedding-3-small", "ada-002") and req.model == name
    with pytest.raises(ApiError, match="does not exist") as err:
        parse_embeddings({"model": NAME, "input": "x"}, schemas, 8, gw.kinds)
    assert err.value.status == 404
    (entry,) = gw.describe()
    assert entry["id"] == "text-embedding-3-small" and entry["root"] == NAME
    assert "ada-002" in entry["aliases"] and "text-embedding-3-small-query" in entry["aliases"], entry["aliases"]
    # two models may not answer to one name
    with pytest.raises(SpecError, match="two models would answer to 'bert_cls'"):
        MultiGateway(GatewayConfig(repository=minilm_repo, more_repositories=(tiny_repos["bert-cls"],),
                                   triton="127.0.0.1:1", served_names=(("all_minilm_l6_v2", ("bert_cls",)),)))
