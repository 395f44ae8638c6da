"""The gateway's rerank APIs (#31) in front of a real tritonserver serving real reranker repositories
(the session's `rerank_server`; `rerank_repo` is the tiny one-label BERT cross-encoder, `xlmr-ce3` a
three-label classifier), with an embedder (MiniLM, the session's server) behind the same gateway:
every route's results equal `CrossEncoder.rank` (order identical, scores within 1e-4), usage equals
the tokenizer's pair counts, bad bodies get 400s naming their field, a request over the front door's
max batch goes up in parts, each kind refuses the other's routes, and admission (size caps,
concurrency) holds for rerank requests as for embeddings."""

import math

import threading

import httpx
import numpy as np
import pytest

from embtrt.reference.parity import cosine_rows
from embtrt.repository.manifest import read_manifest
from test_gateway import NAME, _envelope, _metric, _tei, gateway
from test_gateway_limits import _big
from waiting import until

pytestmark = pytest.mark.integration
TOL = 1e-4     # |served score - CrossEncoder's| (fp32)
GAP = 5e-4     # the documents' reference scores are at least this far apart: an order within TOL is theirs


@pytest.fixture(scope="module")
def folder(rerank_repo):
    return rerank_repo[0]


@pytest.fixture(scope="module")
def repo(rerank_repo):
    return rerank_repo[1]


@pytest.fixture(scope="module")
def manifest(repo):
    m = read_manifest(repo)
    assert m.kind == "reranker" and m.num_labels == 1, (m.kind, m.num_labels)
    return m


@pytest.fixture(scope="module")
def ce(folder):
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(folder), device="cpu")


def _pools(m, url: str) -> list[str]:
    """--pool MODEL:BUCKET=URL for each of the reranker's buckets (the embedder takes --triton)."""
    return [a for b in m.buckets for a in ("--pool", f"{m.name}:{b}={url}")]


@pytest.fixture(scope="module")
def both(repo, manifest, rerank_server, minilm_repo, minilm_server, tmp_path_factory):
    """One gateway for the reranker and the MiniLM embedder, each on its own tritonserver."""
    log = tmp_path_factory.mktemp("gw-rerank") / "gw.log"
    with gateway(repo, log, str(minilm_repo), "--triton", minilm_server.grpc_url,
                 *_pools(manifest, rerank_server.grpc_url)) as url:
        yield url


def _apart(ce, query: str, texts: list[str], n: int) -> list[str]:
    """n of the texts whose reference scores against the query are each at least GAP from the others
    (the tiny model tells them apart: a swapped or misplaced row changes the order)."""
    scores = ce.predict([(query, t) for t in texts])
    docs: list[str] = []
    kept: list[float] = []
    for t, s in zip(texts, scores, strict=True):
        if t != query and all(abs(float(s) - k) >= GAP for k in kept):
            docs.append(t)
            kept.append(float(s))
            if len(docs) == n:
                break
    assert len(docs) == n, f"only {len(docs)} documents {GAP} apart"
    assert max(kept) - min(kept) > 0.05, (min(kept), max(kept))
    return docs


@pytest.fixture(scope="module")
def query(corpus):
    """A short query: pairs with short documents fit the tiny model's 64 tokens, with long ones not."""
    return next(t for t in corpus if 30 <= len(t) <= 60)


@pytest.fixture(scope="module")
def docs(ce, query, corpus):
    return _apart(ce, query, corpus, 16)


def _rank(ce, query: str, docs: list[str], raw: bool = False) -> list[tuple[int, float]]:
    import torch

    return [(int(r["corpus_id"]), float(r["score"]))
            for r in ce.rank(query, docs, activation_fn=torch.nn.Identity() if raw else None)]


def _tokens(ce, query: str, docs: list[str]) -> int:
    """The pairs' tokens as CrossEncoder tokenizes them (longest_first at its max length)."""
    return sum(len(ce.tokenizer(query, d, truncation=True, max_length=ce.max_seq_length)["input_ids"]) for d in docs)


def _assert_ranked(got: list[tuple[int, float]], ref: list[tuple[int, float]]) -> None:
    assert [i for i, _ in got] == [i for i, _ in ref], (got[:5], ref[:5])
    diff = max(abs(a - b) for (_, a), (_, b) in zip(got, ref, strict=True))
    assert diff <= TOL, f"max |score - CrossEncoder| {diff:.2e} > {TOL}"


def _post(url: str, path: str, body) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=120)


def test_cohere_routes_equal_cross_encoder_rank_with_exact_usage(both, manifest, ce, query, docs):
    ref = _rank(ce, query, docs)
    mixed = [d if i % 2 else {"text": d} for i, d in enumerate(docs)]  # strings and {"text"} objects
    for path in ("/v1/rerank", "/v2/rerank"):
        r = _post(both, path, {"model": manifest.name, "query": query, "documents": mixed, "return_documents": True})
        assert r.status_code == 200, r.text
        body = r.json()
        _assert_ranked([(x["index"], x["relevance_score"]) for x in body["results"]], ref)
        assert [x["document"]["text"] for x in body["results"]] == [docs[i] for i, _ in ref]
        assert body["usage"] == {"total_tokens": _tokens(ce, query, docs), "prompt_tokens": _tokens(ce, query, docs)}
        assert body["model"] == manifest.name and body["id"]
    top = _post(both, "/v1/rerank", {"model": manifest.name, "query": query, "documents": docs, "top_n": 3,
                                     "return_documents": False}).json()
    _assert_ranked([(x["index"], x["relevance_score"]) for x in top["results"]], ref[:3])
    assert "document" not in top["results"][0]
    assert top["usage"]["total_tokens"] == _tokens(ce, query, docs)  # every document scored, three shown
    over = _post(both, "/v1/rerank", {"model": manifest.name, "query": query, "documents": docs, "top_n": 999}).json()
    _assert_ranked([(x["index"], x["relevance_score"]) for x in over["results"]], ref)
    # vLLM's /rerank: the same body on TEI's route, model optional; top_n 0 is every document, the
    # documents come back unasked (as vLLM and Jina send them), use_activation false gives the logits
    v = _post(both, "/rerank", {"query": query, "documents": docs, "top_n": 0, "use_activation": False})
    assert v.status_code == 200, v.text
    _assert_ranked([(x["index"], x["relevance_score"]) for x in v.json()["results"]], _rank(ce, query, docs, raw=True))
    assert [x["document"]["text"] for x in v.json()["results"]] == [docs[x["index"]] for x in v.json()["results"]]
    assert v.json()["usage"]["total_tokens"] == _tokens(ce, query, docs) and v.json()["model"] == manifest.name
    quiet = _post(both, "/rerank", {"query": query, "documents": docs, "top_n": 2, "return_documents": False}).json()
    assert [x["index"] for x in quiet["results"]] == [i for i, _ in ref[:2]] and "document" not in quiet["results"][0]


def test_tei_route_equals_rank_raw_scores_and_left_truncation(both, folder, manifest, ce, query, docs):
    """TEI has no `model`: with one reranker on the gateway it is that one. raw_scores gives the logits;
    truncation_direction left cuts pairs as a tokenizer with truncation_side left does."""
    r = _post(both, "/rerank", {"query": query, "texts": docs, "return_text": True})
    assert r.status_code == 200, r.text
    _assert_ranked([(x["index"], x["score"]) for x in r.json()], _rank(ce, query, docs))
    assert [x["text"] for x in r.json()] == [docs[x["index"]] for x in r.json()]
    assert r.headers["x-compute-tokens"] == str(_tokens(ce, query, docs))
    raw = _post(both, "/rerank", {"query": query, "texts": docs, "raw_scores": True}).json()
    _assert_ranked([(x["index"], x["score"]) for x in raw], _rank(ce, query, docs, raw=True))
    assert "text" not in raw[0]

    from sentence_transformers import CrossEncoder

    left = CrossEncoder(str(folder), device="cpu")
    left.tokenizer.truncation_side = "left"
    ref_left = _rank(left, query, docs, raw=True)
    assert any(len(ce.tokenizer(query, d)["input_ids"]) > ce.max_seq_length for d in docs), "no pair is cut"
    assert max(abs(a - b) for (_, a), (_, b) in zip(sorted(ref_left), sorted(_rank(ce, query, docs, raw=True)), strict=True)) > 10 * TOL
    got = _post(both, "/rerank", {"query": query, "texts": docs, "raw_scores": True, "truncation_direction": "left"})
    _assert_ranked([(x["index"], x["score"]) for x in got.json()], ref_left)


def test_nim_route_logits_are_raw_scores_and_truncate_none_refuses_a_long_pair(both, manifest, ce, query, docs):
    passages = [{"text": d} for d in docs]
    r = _post(both, "/v1/ranking", {"model": manifest.name, "query": {"text": query}, "passages": passages,
                                    "truncate": "END"})
    assert r.status_code == 200, r.text
    _assert_ranked([(x["index"], x["logit"]) for x in r.json()["rankings"]], _rank(ce, query, docs, raw=True))
    assert r.json()["usage"] == {"prompt_tokens": _tokens(ce, query, docs), "total_tokens": _tokens(ce, query, docs)}
    short = [d for d in docs if len(ce.tokenizer(query, d)["input_ids"]) <= ce.max_seq_length]
    long = [d for d in docs if len(ce.tokenizer(query, d)["input_ids"]) > ce.max_seq_length]
    assert short and long, (len(short), len(long))
    ok = _post(both, "/v1/ranking", {"model": manifest.name, "query": {"text": query},
                                     "passages": [{"text": d} for d in short]})  # NONE, NIM's default
    _assert_ranked([(x["index"], x["logit"]) for x in ok.json()["rankings"]], _rank(ce, query, short, raw=True))
    err = _envelope(_post(both, "/v1/ranking", {"model": manifest.name, "query": {"text": query},
                                                "passages": [{"text": short[0]}, {"text": long[0]}]}), 400,
                    f"passages[1]: the pair is longer than the max length {manifest.max_seq_length} tokens")
    assert err["param"] == "passages"


def test_bench_s_http_peer_client_measures_the_gateway_on_vllm_s_route(both, manifest, corpus):
    """`embtrt bench --openai-url` speaks the Cohere / Jina body to <url>/rerank (infinity's and vLLM's
    route): against this gateway it is vLLM's body on /rerank, every request answered in full."""
    from embtrt.kinds.reranker.measure import bench_http_reranker

    rows = bench_http_reranker(both, manifest.name, corpus, (3,), (2,), requests=6, warmup=1)
    assert [(r["documents"], r["concurrency"], r["requests"], r["errors"]) for r in rows] == [(3, 2, 6, 0)], rows
    assert rows[0]["pairs_per_s"] > 0


def test_more_documents_than_the_front_door_batch_go_up_in_parts_and_equal_rank(both, manifest, ce, query, corpus):
    mb = manifest.max_batch_size
    n = max(70, 2 * mb + 6)
    many = _apart(ce, query, corpus, n)
    calls = 'embtrt_gateway_upstream_rows_count{pool="all",route="frontdoor"}'
    before = _metric(both, calls)
    r = _post(both, "/v1/rerank", {"model": manifest.name, "query": query, "documents": many})
    assert r.status_code == 200, r.text
    _assert_ranked([(x["index"], x["relevance_score"]) for x in r.json()["results"]], _rank(ce, query, many))
    assert r.json()["usage"]["total_tokens"] == _tokens(ce, query, many)
    assert _metric(both, calls) - before == math.ceil(n / mb)  # in parts of at most the max batch
    # a pair refused by the front door in the second part is named by its index in the request
    texts = [f"short document {i}" for i in range(2 * mb)]
    texts[mb + 3] = " ".join(corpus[:10])
    _tei(_post(both, "/rerank", {"query": "a short query", "texts": texts, "truncate": False}), 422, "Validation",
         f"texts[{mb + 3}]: the pair is longer than the max length {manifest.max_seq_length} tokens")


def test_bad_rerank_bodies_get_400_naming_the_field_and_an_empty_document_is_scored(both, manifest, ce, query, docs):
    m = manifest.name

    def cohere(**kw):
        return {"model": m, "query": query, "documents": docs[:3], **kw}

    cases = [
        ("/v1/rerank", {"query": query, "documents": ["a"]}, "you must provide a model parameter", "model"),
        ("/v1/rerank", cohere(query=""), "query must be a non-empty string", "query"),
        ("/v1/rerank", cohere(documents=[]), "documents must be a non-empty list", "documents"),
        ("/v1/rerank", cohere(documents=["a", 5]), 'documents[1] must be a string or an object {"text": "..."}, got 5',
         "documents"),
        ("/v2/rerank", cohere(top_n=-1), "top_n must be 0 (every document) or more, got -1", "top_n"),
        ("/v2/rerank", cohere(top_n="2"), "top_n must be an integer, got '2'", "top_n"),
        ("/v1/rerank", cohere(documents=["a"] * 2049), "documents has 2049 items; at most 2048 per request", "documents"),
        ("/rerank", {"query": query, "texts": [{"text": "a"}]}, "texts[0] must be a string, got {'text': 'a'}", "texts"),
        ("/rerank", {"query": query, "texts": ["a"], "truncation_direction": "up"},
         "truncation_direction must be 'right' or 'left', not 'up'", "truncation_direction"),
        ("/v1/ranking", {"model": m, "query": query, "passages": [{"text": "a"}]}, 'query must be an object {"text": "..."}',
         "query"),
        ("/v1/ranking", {"model": m, "query": {"text": query}, "passages": [{"text": "a"}], "truncate": "START"},
         "truncate must be 'NONE' or 'END', not 'START'", "truncate"),
    ]
    for path, body, message, param in cases:
        if path == "/rerank":   # TEI's route: TEI's body and status (#51), the field named in the message
            assert _tei(_post(both, path, body), 422, "Validation", message)["error"] == message
            continue
        err = _envelope(_post(both, path, body), 400, message)
        assert (err["message"], err["param"]) == (message, param), (path, err)
    _tei(_post(both, "/rerank", {"query": query, "texts": []}), 400, "Empty", "texts must be a non-empty list")
    _envelope(httpx.post(both + "/v1/rerank", content=b"{not json", timeout=30), 400, "not valid JSON")
    err = _envelope(_post(both, "/v1/rerank", {"model": "nope", "query": query, "documents": ["a"]}), 404,
                    f"the model 'nope' does not exist; this gateway reranks with '{m}'")
    assert err["code"] == "model_not_found"
    with_empty = [docs[0], "", docs[1]]  # CrossEncoder scores an empty document: so does the gateway
    r = _post(both, "/v1/rerank", {"model": m, "query": query, "documents": with_empty})
    assert r.status_code == 200, r.text
    _assert_ranked([(x["index"], x["relevance_score"]) for x in r.json()["results"]], _rank(ce, query, with_empty))


def test_each_kind_refuses_the_others_routes_and_both_serve_behind_one_gateway(both, manifest, minilm_path, corpus):
    from embtrt.reference.torch_ref import st_embed

    err = _envelope(_post(both, "/v1/embeddings", {"model": manifest.name, "input": "x"}), 400, "/v1/rerank")
    assert err["message"] == (f"'{manifest.name}' is a reranker, not an embedder: POST /v1/rerank (Cohere, Jina, "
                              "vLLM), /v2/rerank, /rerank (TEI) or /v1/ranking (NIM) serves it")
    assert (err["param"], err["code"]) == ("model", "wrong_model_kind")
    err = _envelope(_post(both, "/v1/rerank", {"model": NAME, "query": "q", "documents": ["a"]}), 400,
                    f"'{NAME}' is an embedder, not a reranker: POST /v1/embeddings serves it")
    assert err["code"] == "wrong_model_kind"
    models = {e["id"]: e for e in httpx.get(both + "/v1/models").json()["data"]}
    assert {k: e["kind"] for k, e in models.items()} == {manifest.name: "reranker", NAME: "embedder"}
    assert "dimensions" not in models[manifest.name] and "embedding_types" not in models[manifest.name]
    assert models[manifest.name]["num_labels"] == 1 and models[NAME]["dimensions"]
    texts = corpus[:5]
    r = _post(both, "/v1/embeddings", {"model": NAME, "input": texts, "encoding_format": "float"})
    assert r.status_code == 200, r.text
    got = np.asarray([d["embedding"] for d in r.json()["data"]], dtype=np.float32)
    assert cosine_rows(st_embed(minilm_path, texts), got).min() >= 0.9999
    ready = httpx.get(both + "/health/ready", timeout=60)
    assert ready.status_code == 200, ready.text
    assert set(ready.json()["pools"]) == {f"{manifest.name}/all", f"{NAME}/all"}


def test_rerank_requests_over_the_caps_get_413_and_tokens_are_counted_exactly(repo, manifest, rerank_server, ce,
                                                                           tmp_path):
    """Characters: the query once per document and the documents. Tokens: where a bound cannot prove a
    request under --max-request-tokens its pairs are tokenized and counted ([CLS] a b [SEP] c d [SEP]: 7)."""
    with gateway(repo, tmp_path / "gw.log", "--triton", rerank_server.grpc_url, "--max-request-chars", "100",
                 "--max-request-tokens", "40") as u:
        err = _envelope(_post(u, "/v1/rerank", {"model": manifest.name, "query": "q" * 10, "documents": ["d" * 5] * 10}),
                        413, "the input has 150 characters; this gateway takes at most 100 per request "
                             "(--max-request-chars)")
        assert (err["param"], err["code"]) == ("documents", "request_too_large")
        assert _tokens(ce, "a b", ["c d"]) == 7
        r = _post(u, "/v1/rerank", {"model": manifest.name, "query": "a b", "documents": ["c d"] * 3})  # bound 84, 21
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["total_tokens"] == 21
        _envelope(_post(u, "/v1/rerank", {"model": manifest.name, "query": "a b", "documents": ["c d"] * 7}), 413,
                  "the input has 49 tokens; this gateway takes at most 40 per request (--max-request-tokens)")


def test_over_the_concurrency_cap_a_rerank_request_is_429(repo, manifest, rerank_server, minilm_repo, minilm_server,
                                                         corpus, tmp_path):
    """The cap is the gateway's: a large embeddings request holding the only slot makes a rerank request 429."""
    with gateway(repo, tmp_path / "gw.log", str(minilm_repo), "--triton", minilm_server.grpc_url,
                 *_pools(manifest, rerank_server.grpc_url), "--max-concurrent-requests", "1",
                 "--request-timeout", "600") as u:
        done: dict[str, float] = {}
        errors: list[BaseException] = []
        t: threading.Thread = _big(u, 96, corpus, done, "big", errors)
        until(lambda: _metric(u, "embtrt_gateway_requests_in_flight") == 1 or errors, 60, "the large request admitted")
        r = _post(u, "/v1/rerank", {"model": manifest.name, "query": "q", "documents": ["a"]})
        t.join(600)
        assert not errors, errors
        err = _envelope(r, 429, "serving its limit of 1 concurrent requests")
        assert err["code"] == "too_many_requests" and r.headers["retry-after"] == "1" and "big" in done
        assert _post(u, "/v1/rerank", {"model": manifest.name, "query": "q", "documents": ["a"]}).status_code == 200


def test_a_classifier_of_several_labels_is_refused_on_the_rerank_routes(repo, manifest, rerank_repos, rerank_server,
                                                                        tmp_path):
    """No rerank API says which label orders the documents: a three-label model is refused, naming its labels;
    with two rerankers on the gateway TEI's /rerank needs a model."""
    three = read_manifest(rerank_repos["xlmr-ce3"])
    assert three.kind == "reranker" and three.num_labels == 3
    with gateway(repo, tmp_path / "gw.log", str(rerank_repos["xlmr-ce3"]), *_pools(manifest, rerank_server.grpc_url),
                 *_pools(three, rerank_server.grpc_url)) as u:
        for path, body in (("/v1/rerank", {"model": three.name, "query": "q", "documents": ["a"]}),
                           ("/rerank", {"model": three.name, "query": "q", "texts": ["a"]}),
                           ("/v1/ranking", {"model": three.name, "query": {"text": "q"}, "passages": [{"text": "a"}]})):
            message = f"'{three.name}' has 3 labels (a classifier, not a ranker)"
            if path == "/rerank":   # TEI: a model that cannot serve the route is a 424 Backend error
                _tei(_post(u, path, body), 424, "Backend", message)
                continue
            err = _envelope(_post(u, path, body), 400, message)
            assert (err["param"], err["code"]) == ("model", "wrong_model_kind")
        _tei(_post(u, "/rerank", {"query": "q", "texts": ["a"]}), 422, "Validation", "you must provide a model parameter "
             f"(this gateway serves several rerankers: '{manifest.name}', '{three.name}')")
        assert _post(u, "/rerank", {"model": manifest.name, "query": "q", "texts": ["a"]}).status_code == 200
        models = {e["id"]: e for e in httpx.get(u + "/v1/models").json()["data"]}
        assert (models[three.name]["kind"], models[three.name]["num_labels"]) == ("reranker", 3)


def test_vllm_score_equals_cross_encoder_predict_in_pair_order(both, manifest, ce, query, docs):
    """vLLM's /score and /v1/score (#51): every spelling of its two sides, one query against N documents or
    N pairs by position, scores in pair order (not sorted) as CrossEncoder.predict gives them, exact usage;
    use_activation false gives the logits; bad bodies get vLLM's error shape."""
    import torch

    m, d = manifest.name, docs[:5]
    want = ce.predict([(query, x) for x in d])
    for body in ({"model": m, "queries": query, "documents": d}, {"text_1": query, "text_2": d},
                 {"model": m, "data_1": [query] * 5, "data_2": d}, {"queries": query, "items": d}):
        for path in ("/score", "/v1/score"):
            r = _post(both, path, body)
            assert r.status_code == 200, r.text
            j = r.json()
            assert j["object"] == "list" and j["model"] == m and j["id"].startswith("score-") and j["created"] > 0
            assert [(x["index"], x["object"]) for x in j["data"]] == [(i, "score") for i in range(5)]
            assert np.abs(np.array([x["score"] for x in j["data"]]) - want).max() <= TOL
            assert j["usage"]["prompt_tokens"] == j["usage"]["total_tokens"] == _tokens(ce, query, d)
    pairs = [(query, d[0]), (docs[7], d[1]), (query, d[2])]   # N with N: each pair its own query
    got = _post(both, "/score", {"queries": [p[0] for p in pairs], "documents": [p[1] for p in pairs],
                                 "use_activation": False}).json()
    raw = ce.predict(pairs, activation_fn=torch.nn.Identity())
    assert np.abs(np.array([x["score"] for x in got["data"]]) - raw).max() <= TOL
    for body, message, param in (({"queries": query}, "you must provide queries and documents", "documents"),
                                 ({"queries": [query] * 2, "documents": d[:3]}, "queries has 2 items and documents 3",
                                  "documents"),
                                 ({"text_1": query, "text_2": [{"content": []}]}, "text_2[0] must be a string",
                                  "text_2")):
        r = _post(both, "/score", body)
        err = r.json()["error"]
        assert r.status_code == 400 and (err["type"], err["code"], err["param"]) == ("BadRequestError", 400, param)
        assert message in err["message"], err
    assert _post(both, "/score", {"text_1": query, "text_2": d[:1]}).status_code == 200


def test_post_root_goes_to_the_default_models_route_and_a_similarity_body_to_the_embedder(
        repo, manifest, rerank_server, minilm_repo, minilm_server, ce, query, docs, tmp_path):
    """TEI's POST / (#51): several models behind the gateway, --default-model names the one TEI's bodies
    (which name none) go to, and /info describes it; a similarity body goes to the embedder by its shape."""
    with gateway(repo, tmp_path / "gw.log", str(minilm_repo), "--triton", minilm_server.grpc_url,
                 *_pools(manifest, rerank_server.grpc_url), "--default-model", manifest.name) as u:
        r = _post(u, "/", {"query": query, "texts": docs})
        assert r.status_code == 200, r.text
        _assert_ranked([(x["index"], x["score"]) for x in r.json()], _rank(ce, query, docs))
        assert r.headers["x-compute-tokens"] == str(_tokens(ce, query, docs))
        info = httpx.get(u + "/info").json()
        assert info["model_id"] == manifest.name and list(info["model_type"]) == ["reranker"]
        assert info["model_type"]["reranker"]["id2label"] == {"0": "LABEL_0"}
        sims = _post(u, "/", {"inputs": {"source_sentence": query, "sentences": docs[:3]}, "parameters": {}})
        assert sims.status_code == 200 and len(sims.json()) == 3, sims.text
        same = _post(u, "/similarity", {"inputs": {"source_sentence": query, "sentences": docs[:3]}}).json()
        assert np.abs(np.array(sims.json()) - np.array(same)).max() <= 1e-6   # /similarity's reference: test_gateway_anchors
        _tei(_post(u, "/", {"query": query}), 422, "Validation", "you must provide a texts parameter")
    with gateway(repo, tmp_path / "gw2.log", str(minilm_repo), "--triton", minilm_server.grpc_url,
                 *_pools(manifest, rerank_server.grpc_url)) as u:
        _tei(_post(u, "/", {"inputs": "a"}), 422, "Validation", "start it with --default-model")
        assert httpx.get(u + "/info").status_code == 422


def test_cohere_sdk_rerank_v1_and_v2_equal_cross_encoder_rank(both, manifest, ce, query, docs):
    """Cohere's own SDK unmodified (#51): Client.rerank -> /v1/rerank, ClientV2.rerank -> /v2/rerank."""
    import cohere

    ref = _rank(ce, query, docs)
    v2 = cohere.ClientV2(api_key="unused", base_url=both).rerank(model=manifest.name, query=query, documents=docs)
    _assert_ranked([(r.index, r.relevance_score) for r in v2.results], ref)
    v1 = cohere.Client(api_key="unused", base_url=both).rerank(model=manifest.name, query=query, documents=docs, top_n=3,
                                                             return_documents=True)
    _assert_ranked([(r.index, r.relevance_score) for r in v1.results], ref[:3])
    assert [r.document.text for r in v1.results] == [docs[i] for i, _ in ref[:3]]
    with pytest.raises(cohere.BadRequestError):
        cohere.ClientV2(api_key="unused", base_url=both).rerank(model=manifest.name, query="", documents=docs)


def test_tei_predict_on_pairs_gives_cross_encoder_predict(both, manifest, ce, query, docs):
    """TEI serves /predict for rerankers too (#51): pairs [query, document], scores as CrossEncoder.predict
    (the model's activation; raw_scores the logits), each input's [{score, label}]; a single text is refused."""
    import torch

    pairs = [[query, d] for d in docs[:4]] + [[docs[5], docs[6]]]
    r = httpx.post(both + "/predict", json={"inputs": pairs}, timeout=60)
    assert r.status_code == 200, r.text
    want = ce.predict([tuple(p) for p in pairs])
    assert [row[0]["label"] for row in r.json()] == ["LABEL_0"] * len(pairs)
    assert np.abs(np.array([row[0]["score"] for row in r.json()]) - want).max() <= TOL
    one = httpx.post(both + "/predict", json={"inputs": pairs[0], "raw_scores": True}, timeout=60).json()
    raw = ce.predict([tuple(pairs[0])], activation_fn=torch.nn.Identity())
    assert abs(one[0]["score"] - float(raw[0])) <= TOL
    _tei(httpx.post(both + "/predict", json={"inputs": query}, timeout=60), 422, "Validation",
         "it scores text pairs, so send each input as [query, document]")
