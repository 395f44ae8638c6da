"""The gateway's route table (#50): every request to its operation's handler, 405 with Allow for a
known path asked with another method, 404 naming the routes served for an unknown one."""

import re

import pytest

from embtrt.scale.gateway.errors import ApiError
from embtrt.scale.gateway.route_table import OWN_OPERATIONS, routes_of
from embtrt.scale.gateway.routes import Routes, all_routes

TABLE = all_routes()
EMBED_ROUTES, RERANK_ROUTES, SPARSE_ROUTES, CLASSIFY_ROUTES, TOKEN_ROUTES, ENCODE_ROUTES, TOKENIZE_ROUTES = (
    routes_of(op) for op in ("embed", "rank", "embed_sparse", "classify", "token_vectors", "encode", "tokenize"))
OWN = [r for r in TABLE if r.operation in OWN_OPERATIONS]
OPS = ("embed", "rank", "embed_sparse", "classify", "token_vectors", "encode", "tokenize", "models", "live", "ready",
       "metrics", "info", "root", "openapi")


def _routes(served):
    return Routes({op: op for op in OPS}, set(served))   # each handler stands for its operation's name


def test_every_route_goes_to_its_operation():
    r = _routes({"embed", "rank", "embed_sparse", "classify", "token_vectors", "encode"})
    assert {r.find("POST", p) for p in EMBED_ROUTES} == {"embed"}
    assert {r.find("POST", p) for p in RERANK_ROUTES} == {"rank"}
    assert {r.find("POST", p) for p in SPARSE_ROUTES} == {"embed_sparse"}
    assert {r.find("POST", p) for p in TOKENIZE_ROUTES} == {"tokenize"}
    assert {r.find("POST", p) for p in CLASSIFY_ROUTES} == {"classify"}
    assert {r.find("POST", p) for p in TOKEN_ROUTES} == {"token_vectors"}   # TEI's /embed_all, vLLM's /pooling
    assert r.find("POST", "/v1/encode") == "encode"
    assert r.find("GET", "/v1/models") == "models" and r.find("GET", "/health/ready") == "ready"
    assert len({(x.method, x.path) for x in TABLE}) == len(TABLE) == (len(EMBED_ROUTES) + len(RERANK_ROUTES)
                                                                       + len(SPARSE_ROUTES) + len(CLASSIFY_ROUTES)
                                                                       + len(TOKEN_ROUTES) + len(ENCODE_ROUTES)
                                                                       + len(TOKENIZE_ROUTES) + len(OWN))
    # TEI's POST / (its model's route, anchors.Root) and GET / (health) share a path; NIM's and TEI's GET routes
    assert r.find("POST", "/") == "root" and r.find("GET", "/info") == "info"
    assert r.find("GET", "/v1/health/ready") == "ready" and r.find("GET", "/v1/health/live") == "live"
    assert r.find("GET", "/v1/metadata") == "info" and r.find("GET", "/v1/metrics") == "metrics"
    # openai's models.retrieve (a path parameter, "/" in a name included) and TEI's health checks (#51)
    assert r.find("GET", "/v1/models/all_minilm_l6_v2") == r.find("GET", "/v1/models/BAAI/bge-m3") == "models"
    assert {r.find("GET", p) for p in ("/health", "/ping", "/")} == {"ready"}


def test_a_path_parameter_route_answers_405_for_another_method_and_404_without_its_parameter():
    r = _routes({"embed"})
    with pytest.raises(ApiError) as e:
        r.find("POST", "/v1/models/x")
    assert e.value.status == 405 and e.value.headers == [(b"allow", b"GET")]
    assert r.find("GET", "/v1/models") == "models"
    with pytest.raises(ApiError) as e:
        r.find("GET", "/v1/modelsx")
    assert e.value.status == 404


def test_a_route_of_an_operation_no_model_serves_still_reaches_its_handler():
    """Its parser answers (a 400 naming the model's own routes, as before the table): the table only
    leaves such routes out of the 404's list."""
    r = _routes({"rank"})
    assert r.find("POST", "/v1/embeddings") == "embed"
    with pytest.raises(ApiError) as e:
        r.find("POST", "/nope")
    assert e.value.status == 404 and e.value.code == "unknown_route"
    assert ("POST /v1/rerank, POST /v2/rerank, POST /rerank, POST /v1/ranking, POST /score, POST /v1/score, "
            "GET /v1/models") in e.value.message
    assert "/v1/embeddings" not in e.value.message and "sparse" not in e.value.message


def test_a_wrong_method_is_405_with_allow():
    r = _routes({"embed"})
    with pytest.raises(ApiError) as e:
        r.find("GET", "/v1/embeddings")
    assert e.value.status == 405 and e.value.headers == [(b"allow", b"POST")]
    assert e.value.message == "/v1/embeddings takes POST, not GET"
    with pytest.raises(ApiError) as e:
        r.find("POST", "/metrics")
    assert e.value.headers == [(b"allow", b"GET")] and "takes GET, not POST" in e.value.message


def test_an_operation_without_a_handler_is_refused_at_start():
    with pytest.raises(ValueError, match="embed_sparse"):
        Routes({op: op for op in OPS if op != "embed_sparse"}, set())


def test_the_operations_are_the_gateways_parts_one_row_each(monkeypatch):
    """operations(): the shared operations' rows (scale/gateway/ops, SHARED's order), then the gateway's COMMON
    ones; two rows of one operation are a start-up error."""
    from embtrt.scale.gateway import operations as ops

    assert list(ops.operations()) == ["embed", "rank", "embed_sparse", "classify", "token_vectors", "encode",
                                      "tokenize"]   # the gateway's COMMON last
    assert [r.path for r in TABLE][:3] == ["/v1/embeddings", "/embeddings", "/embed"]
    monkeypatch.setattr(ops, "SHARED", (*ops.SHARED, ops.SHARED[1]))
    ops.operations.cache_clear()
    try:
        with pytest.raises(ValueError, match="two rows of the gateway operation 'rank'"):
            ops.operations()
    finally:
        monkeypatch.undo()
        ops.operations.cache_clear()
    assert "rank" in ops.operations()


def test_every_routes_dialect_holds_its_operations_shape_and_a_request_answers_in_its_own(monkeypatch):
    """Each (operation, dialect) of the route table is a shape of that dialect's module; a route whose dialect has
    no shape of its operation stops the gateway at start; a request answers with its own dialect's shape (vLLM's
    body on TEI's /rerank parses as Cohere's and answers so)."""
    from types import SimpleNamespace

    from embtrt.scale.gateway import operations as ops
    from embtrt.scale.gateway.dialects import SHAPES, cohere, tei
    from embtrt.scale.gateway.ops.rank import RerankModel
    from embtrt.scale.gateway.route_table import Route

    brought = dict(ops.operations())
    for r in TABLE:
        if r.operation in brought:
            assert (r.operation, r.dialect) in SHAPES, r
    assert SHAPES[("rank", "tei")].parse.__module__ == tei.__name__
    models, cfg = {"ce": RerankModel(1, 64)}, SimpleNamespace(max_items=4, default_model=None)
    req = brought["rank"].parse(models, {}, cfg, "/rerank", {"query": "q", "documents": ["a", "b"]})
    assert req.api == "cohere" and SHAPES[("rank", req.api)].answer is SHAPES[("rank", "cohere")].answer
    assert cohere.parse_rank.__module__ == cohere.__name__
    monkeypatch.setattr(ops, "ROUTES", (*TABLE, Route("POST", "/v2/ranking", "rank", "nim-v2")))
    with pytest.raises(ValueError, match="POST /v2/ranking speaks 'nim-v2', whose module holds no 'rank' shape"):
        ops.check_table(brought)


def test_the_table_and_the_operations_agree_or_the_gateway_does_not_start(monkeypatch):
    from embtrt.scale.gateway import operations as ops
    from embtrt.scale.gateway.operation import Operation
    from embtrt.scale.gateway.route_table import Route

    assert routes_of("embed")["/embed"] == "tei" and routes_of("rank")["/v1/score"] == "vllm-score"
    brought = dict(ops.operations())
    with pytest.raises(ValueError, match="the operation 'summarize' has no route"):
        ops.check_table({**brought, "summarize": Operation("summarize", "summarize", "latency", None, None)})
    monkeypatch.setattr(ops, "ROUTES", (*TABLE, Route("POST", "/v1/summarize", "summarize", "openai")))
    with pytest.raises(ValueError, match="POST /v1/summarize names the operation 'summarize', which the gateway does not have"):
        ops.check_table(brought)


def _docs_rows() -> list[tuple[str, set[tuple[str, str]], str]]:
    """docs/scale-out.md's table of the anchors' routes: (anchor, {(method, path)}, kinds) per row."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "scale-out.md").read_text()
    table = text.split("### Drop-in routes", 1)[1].split("\n\n", 3)[2]
    rows = []
    for line in table.splitlines()[2:]:
        anchor, route, kinds = [c.strip() for c in line.strip("|").split("|")][:3]
        method = route.split()[0].strip("`")
        paths = {(method, p) for p in re.findall(r"`(?:[A-Z]+ )?(/[^`\s]*)`", route)}
        rows.append((anchor, paths, kinds))
    return rows


def test_the_docs_table_lists_every_route_and_only_the_kinds_that_serve_it():
    """docs/scale-out.md's table against the literal route table: the same (method, path) set, and for
    each model route the kinds a row names serve its operation (Kind.operations; bge-m3's extra ones)."""
    from embtrt.kinds.multivector.scale import M3_OPERATIONS
    from embtrt_backend.kinds import KINDS

    rows = _docs_rows()
    documented = set().union(*(paths for _, paths, _ in rows))
    assert documented == {(r.method, r.path) for r in TABLE}, (documented ^ {(r.method, r.path) for r in TABLE})
    serves = {k.name: set(k.operations) | ({"tokenize"}) for k in KINDS}
    serves["bge-m3"] = serves["multivector"] | set(M3_OPERATIONS)
    operation = {(r.method, r.path): r.operation for r in TABLE}
    for anchor, paths, kinds in rows:
        named = set(re.findall(r"\b(embedder|reranker|sparse|classifier|multivector|multimodal|bge-m3)\b", kinds)) \
            if kinds != "all" else set(serves)
        for key in paths:
            op = operation[key]
            if op in OWN_OPERATIONS:
                continue
            assert named, (anchor, key, kinds)
            wrong = {k for k in named if op not in serves[k]}
            assert not wrong, f"{anchor} {key} names {wrong}, which do not serve {op}"
