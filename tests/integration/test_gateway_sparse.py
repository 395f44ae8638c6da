"""The gateway's sparse routes (#32) in front of a real tritonserver serving a real sparse repository
(the session's `splade`: a tiny SPLADE with a query prompt "query: "), with an embedder (MiniLM, the
session's server) behind the same gateway: TEI's /embed_sparse and /v1/sparse equal
`SparseEncoder.encode_query` / `encode_document` (weights within 1e-4, the same active indices), usage
equals the tokenizer's counts, truncation and max_active_dims as SparseEncoder's, bad bodies get 400s
naming their field, more texts than the front door's max batch go up in parts, each kind refuses the
others' routes, and admission (size caps, concurrency) holds for sparse requests as for embeddings."""

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
TOL = 1e-4     # max |served weight - SparseEncoder's| (fp32)
CALLS = 'embtrt_gateway_upstream_rows_count{pool="all",route="frontdoor"}'


@pytest.fixture(scope="module")
def folder(splade):
    return splade[0]


@pytest.fixture(scope="module")
def repo(splade):
    return splade[1]


@pytest.fixture(scope="module")
def manifest(repo):
    m = read_manifest(repo)
    assert m.kind == "sparse" and m.name == "splade", (m.kind, m.name)
    return m


@pytest.fixture(scope="module")
def se(folder):
    from sentence_transformers import SparseEncoder

    return SparseEncoder(str(folder), device="cpu")


def _pools(m, url: str) -> list[str]:
    """--pool MODEL:BUCKET=URL for each of the sparse encoder's buckets (the embedder takes --triton)."""
    return [a for b in m.buckets for a in ("--pool", f"{m.name}:{b}={url}")]


@pytest.fixture(scope="module")
def both(repo, manifest, splade_server, minilm_repo, minilm_server, tmp_path_factory):
    """One gateway for the sparse encoder and the MiniLM embedder, each on its own tritonserver."""
    log = tmp_path_factory.mktemp("gw-sparse") / "gw.log"
    with gateway(repo, log, str(minilm_repo), "--triton", minilm_server.grpc_url,
                 *_pools(manifest, splade_server.grpc_url)) as url:
        yield url


@pytest.fixture(scope="module")
def texts(se, corpus):
    """Ten texts within the tiny model's 64 tokens, then two over it (cut at the max length)."""
    short = [t for t in corpus if len(se.tokenizer(t)["input_ids"]) <= se.max_seq_length][:10]
    assert len(short) == 10
    return short + [" ".join(corpus[30:45]), " ".join(corpus[50:60])]


def _ref(se, texts: list[str], input_type: str, **kw) -> np.ndarray:
    fn = se.encode_query if input_type == "query" else se.encode_document
    return fn(texts, convert_to_tensor=True, **kw).to_dense().float().numpy()


def _tokens(se, texts: list[str], prompt: str = "") -> int:
    """The texts' tokens as SparseEncoder tokenizes them (the prompt prepended, cut at its max length)."""
    return sum(len(se.tokenizer(prompt + t, truncation=True, max_length=se.max_seq_length)["input_ids"]) for t in texts)


def _dense(rows: list[tuple[list[int], list[float]]], vocab: int) -> np.ndarray:
    out = np.zeros((len(rows), vocab), dtype=np.float32)
    for i, (ix, v) in enumerate(rows):
        assert ix == sorted(ix) and len(set(ix)) == len(ix), "indices not ascending"
        out[i, ix] = v
    return out


def _tei_rows(doc) -> list[tuple[list[int], list[float]]]:
    return [([x["index"] for x in row], [x["value"] for x in row]) for row in doc]


def _v1_rows(doc) -> list[tuple[list[int], list[float]]]:
    assert [d["index"] for d in doc["data"]] == list(range(len(doc["data"])))
    assert {d["object"] for d in doc["data"]} == {"sparse_embedding"}
    return [(d["indices"], d["values"]) for d in doc["data"]]


def _assert_equal(rows, want: np.ndarray) -> None:
    got = _dense(rows, want.shape[1])
    for (ix, _), w in zip(rows, want, strict=True):
        assert ix == np.flatnonzero(w > 0).tolist(), "active dimensions differ from SparseEncoder's"
    diff = float(np.abs(got - want).max())
    assert diff <= TOL, f"max |weight - SparseEncoder| {diff:.2e} > {TOL}"


def _post(url: str, path: str, body) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=120)


def test_embed_sparse_equals_encode_document_and_with_the_query_prompt_encode_query(both, manifest, se, texts):
    """TEI has no `model`: with one sparse encoder on the gateway it is that one."""
    want = _ref(se, texts, "document")
    assert 10 < np.median((want > 0).sum(axis=1)) < 1000   # sparse, and not empty
    r = _post(both, "/embed_sparse", {"inputs": texts})
    assert r.status_code == 200, r.text
    _assert_equal(_tei_rows(r.json()), want)
    assert r.headers["x-compute-tokens"] == str(_tokens(se, texts))
    q = _post(both, "/embed_sparse", {"inputs": texts, "prompt_name": "query", "truncate": True})
    _assert_equal(_tei_rows(q.json()), _ref(se, texts, "query"))
    assert q.headers["x-compute-tokens"] == str(_tokens(se, texts, "query: "))
    # TEI's /tokenize with the prompt by name: the ids of "query: " + text, which differ from the text's own
    ids = lambda r: [t["id"] for t in r.json()[0]]  # noqa: E731
    asked = _post(both, "/tokenize", {"model": manifest.name, "inputs": texts[0], "prompt_name": "query"})
    plain = _post(both, "/tokenize", {"model": manifest.name, "inputs": texts[0]})
    assert ids(asked) == se.tokenizer("query: " + texts[0])["input_ids"] != ids(plain), asked.text
    one = _post(both, "/embed_sparse", {"inputs": texts[0]}).json()   # a string is one input
    assert len(one) == 1
    _assert_equal(_tei_rows(one), want[:1])


@pytest.mark.parametrize("input_type", ["query", "document", "passage"])
def test_v1_sparse_equals_sparse_encoder_per_input_type_with_exact_usage(both, manifest, se, texts, input_type):
    r = _post(both, "/v1/sparse", {"model": manifest.name, "input": texts, "input_type": input_type})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert (doc["object"], doc["model"]) == ("list", manifest.name)
    _assert_equal(_v1_rows(doc), _ref(se, texts, input_type))
    n = _tokens(se, texts, "query: " if input_type == "query" else "")
    assert doc["usage"] == {"prompt_tokens": n, "total_tokens": n}


def test_the_query_prompt_changes_the_vector_and_max_active_dims_keeps_the_largest(both, manifest, se, texts):
    body = {"model": manifest.name, "input": texts}
    q = _dense(_v1_rows(_post(both, "/v1/sparse", {**body, "input_type": "query"}).json()), manifest.dim)
    d = _dense(_v1_rows(_post(both, "/v1/sparse", {**body, "input_type": "document"}).json()), manifest.dim)
    assert float(np.abs(q - d).max()) > 0.1
    r = _post(both, "/v1/sparse", {**body, "input_type": "query", "max_active_dims": 16})
    assert r.status_code == 200, r.text
    rows = _v1_rows(r.json())
    assert all(len(ix) == 16 for ix, _ in rows)
    _assert_equal(rows, _ref(se, texts, "query", max_active_dims=16))


def test_return_tokens_names_each_active_dimension_as_sparse_encoder_decode(both, manifest, se, texts):
    """/v1/sparse with return_tokens: each active dimension's token string, in the order of its indices,
    as SparseEncoder.decode names them; without it no tokens field; a non-boolean is a 400."""
    r = _post(both, "/v1/sparse", {"model": manifest.name, "input": texts[:4], "input_type": "query",
                                    "max_active_dims": 8, "return_tokens": True})
    assert r.status_code == 200, r.text
    emb = se.encode_query(texts[:4], convert_to_tensor=True, max_active_dims=8)
    for d, want in zip(r.json()["data"], se.decode(emb, top_k=None), strict=True):
        assert len(d["tokens"]) == len(d["indices"]) == 8
        assert dict(zip(d["tokens"], d["values"], strict=True)).keys() == {t for t, _ in want}
        for tok, w in want:
            assert abs(dict(zip(d["tokens"], d["values"], strict=True))[tok] - w) <= TOL
    plain = _post(both, "/v1/sparse", {"model": manifest.name, "input": texts[:1]}).json()["data"][0]
    assert "tokens" not in plain
    bad = _post(both, "/v1/sparse", {"model": manifest.name, "input": "a", "return_tokens": "yes"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "return_tokens"


def test_truncation_none_refuses_a_long_text_by_index_and_left_cuts_the_start(both, manifest, folder, se, texts):
    long_at = len(texts) - 2
    assert len(se.tokenizer(texts[long_at])["input_ids"]) > se.max_seq_length
    message = f"[{long_at}]: text is longer than the max sequence length {manifest.max_seq_length} tokens"
    _tei(_post(both, "/embed_sparse", {"inputs": texts, "truncate": False}), 422, "Validation", "inputs" + message)
    err = _envelope(_post(both, "/v1/sparse", {"model": manifest.name, "input": texts, "truncate": "NONE"}), 400,
                    "input" + message)
    assert err["param"] == "input"
    short = texts[:long_at]
    ok = _post(both, "/embed_sparse", {"inputs": short, "truncate": False})   # none too long: encoded
    _assert_equal(_tei_rows(ok.json()), _ref(se, short, "document"))

    from sentence_transformers import SparseEncoder

    left = SparseEncoder(str(folder), device="cpu")
    left.tokenizer.truncation_side = "left"
    want = _ref(left, texts, "document")
    assert float(np.abs(want[long_at:] - _ref(se, texts[long_at:], "document")).max()) > 10 * TOL   # cut elsewhere
    r = _post(both, "/embed_sparse", {"inputs": texts, "truncation_direction": "left"})
    _assert_equal(_tei_rows(r.json()), want)
    start = _post(both, "/v1/sparse", {"model": manifest.name, "input": texts, "truncate": "START"}).json()
    _assert_equal(_v1_rows(start), want)


def test_more_texts_than_the_front_door_batch_go_up_in_parts_in_order(both, manifest, se, corpus):
    mb = manifest.max_batch_size
    n = max(70, 2 * mb + 6)
    many = [f"{i} {corpus[i % len(corpus)]}" for i in range(n)]
    before = _metric(both, CALLS)
    r = _post(both, "/v1/sparse", {"model": manifest.name, "input": many, "input_type": "query"})
    assert r.status_code == 200, r.text
    assert _metric(both, CALLS) - before == math.ceil(n / mb)  # in parts of at most the max batch
    _assert_equal(_v1_rows(r.json()), _ref(se, many, "query"))
    assert r.json()["usage"]["total_tokens"] == _tokens(se, many, "query: ")
    # a text refused by the front door in the second part is named by its index in the request
    bad = [f"short text {i}" for i in range(2 * mb)]
    bad[mb + 3] = " ".join(corpus[:10])
    _tei(_post(both, "/embed_sparse", {"inputs": bad, "truncate": False}), 422, "Validation",
         f"inputs[{mb + 3}]: text is longer than the max sequence length {manifest.max_seq_length} tokens")


def test_bad_sparse_bodies_get_400_naming_the_field(both, manifest):
    m = manifest.name
    cases = [
        ("/v1/sparse", {"input": "a"}, "you must provide a model parameter", "model"),
        ("/v1/sparse", {"model": m, "input": []}, "input must be a string or a non-empty list of strings", "input"),
        ("/v1/sparse", {"model": m, "input": ["a", 5]}, "input[1] must be a string, got 5", "input"),
        ("/v1/sparse", {"model": m, "input": ["a"] * 2049}, "input has 2049 items; at most 2048 per request", "input"),
        ("/v1/sparse", {"model": m, "input": "a", "input_type": "title"},
         "invalid input_type 'title': allowed query, passage, document", "input_type"),
        ("/v1/sparse", {"model": m, "input": "a", "max_active_dims": 0},
         "invalid max_active_dims 0: must be an integer >= 1", "max_active_dims"),
        ("/v1/sparse", {"model": m, "input": "a", "truncate": "MIDDLE"},
         "invalid truncate 'MIDDLE': allowed END, START, NONE", "truncate"),
        ("/v1/sparse", {"model": m, "input": "a", "dimensions": 8}, "dimensions does not apply to a sparse encoder "
         "(its output is one weight per vocabulary token; max_active_dims keeps the largest K)", "dimensions"),
        ("/v1/sparse", {"model": m, "input": "a", "embedding_type": "int8"}, "embedding_type does not apply to a sparse "
         "encoder (its output is one weight per vocabulary token; max_active_dims keeps the largest K)",
         "embedding_type"),
        ("/embed_sparse", {"inputs": "a", "truncate": "END"}, "truncate must be true or false, got 'END'", "truncate"),
        ("/embed_sparse", {"inputs": "a", "truncation_direction": "up"},
         "truncation_direction must be 'right' or 'left', not 'up'", "truncation_direction"),
        ("/embed_sparse", {"inputs": "a", "prompt_name": "code"},
         "unknown prompt_name 'code': this model's prompts are document, query", "prompt_name"),
        ("/embed_sparse", {"texts": ["a"]}, "you must provide an inputs parameter", "inputs"),
    ]
    for path, body, message, param in cases:
        if path == "/embed_sparse":   # TEI's route: TEI's body and status (#51), the field named in the message
            assert _tei(_post(both, path, body), 422, "Validation", message)["error"] == message
            continue
        err = _envelope(_post(both, path, body), 400, message)
        assert (err["message"], err["param"]) == (message, param), (path, err)
    _tei(_post(both, "/embed_sparse", {"inputs": []}), 400, "Empty", "inputs must be a string or a non-empty list")
    _envelope(httpx.post(both + "/v1/sparse", content=b"{not json", timeout=30), 400, "not valid JSON")
    err = _envelope(_post(both, "/v1/sparse", {"model": "nope", "input": "a"}), 404,
                    f"the model 'nope' does not exist; this gateway encodes sparse vectors with '{m}'")
    assert err["code"] == "model_not_found"
    assert _post(both, "/v1/sparse", {"model": m, "input": "still served"}).status_code == 200


def test_each_kind_refuses_the_others_routes_and_both_serve_behind_one_gateway(both, manifest, minilm_path, corpus):
    from embtrt.reference.torch_ref import st_embed

    sparse_routes = "POST /v1/sparse or /embed_sparse (TEI) serves it"
    err = _envelope(_post(both, "/v1/embeddings", {"model": manifest.name, "input": "x"}), 400, "/embed_sparse")
    assert err["message"] == f"'{manifest.name}' is a sparse encoder, not an embedder: {sparse_routes}"
    assert (err["param"], err["code"]) == ("model", "wrong_model_kind")
    err = _envelope(_post(both, "/v1/rerank", {"model": manifest.name, "query": "q", "documents": ["a"]}), 400,
                    f"'{manifest.name}' is a sparse encoder, not a reranker: {sparse_routes}")
    assert err["code"] == "wrong_model_kind"
    wrong = f"'{NAME}' is an embedder, not a sparse encoder: POST /v1/embeddings serves it"
    _tei(_post(both, "/embed_sparse", {"model": NAME, "inputs": "x"}), 424, "Backend", wrong)   # TEI: 424
    err = _envelope(_post(both, "/v1/sparse", {"model": NAME, "input": "x"}), 400, wrong)
    assert (err["param"], err["code"]) == ("model", "wrong_model_kind")
    models = {e["id"]: e for e in httpx.get(both + "/v1/models").json()["data"]}
    assert {k: e["kind"] for k, e in models.items()} == {manifest.name: "sparse", NAME: "embedder"}
    entry = models[manifest.name]
    assert (entry["vocab_size"], entry["max_seq_length"]) == (manifest.dim, manifest.max_seq_length)
    assert entry["prompts"] == {"query": "query: ", "document": ""} and "dimensions" not in entry
    texts = corpus[:5]
    r = _post(both, "/v1/embeddings", {"model": NAME, "input": texts, "encoding_format": "float"})
    assert r.status_code == 200, r.text
    got = np.asarray([d["embedding"] for d in r.json()["data"]], dtype=np.float32)
    assert cosine_rows(st_embed(minilm_path, texts), got).min() >= 0.9999
    ready = httpx.get(both + "/health/ready", timeout=60)
    assert ready.status_code == 200, ready.text
    assert set(ready.json()["pools"]) == {f"{manifest.name}/all", f"{NAME}/all"}
    assert _metric(both, 'embtrt_gateway_requests_total{route="sparse",status="200"}') >= 1
    assert _metric(both, "embtrt_gateway_sparse_seconds_count") >= 1


def test_sparse_requests_over_the_caps_get_413_and_tokens_are_counted_exactly(repo, manifest, splade_server, se,
                                                                           tmp_path):
    """Where a bound cannot prove a request under --max-request-tokens its texts are tokenized and
    counted as the front door does ([CLS] a b [SEP]: 4 tokens)."""
    with gateway(repo, tmp_path / "gw.log", "--triton", splade_server.grpc_url, "--max-request-chars", "100",
                 "--max-request-tokens", "40") as u:
        err = _envelope(_post(u, "/v1/sparse", {"model": manifest.name, "input": ["d" * 30] * 4}), 413,
                        "the input has 120 characters; this gateway takes at most 100 per request (--max-request-chars)")
        assert (err["param"], err["code"]) == ("input", "request_too_large")
        assert _tokens(se, ["a b"]) == 4
        r = _post(u, "/embed_sparse", {"inputs": ["a b"] * 3})   # bound 48 > 40: counted, 12
        assert r.status_code == 200, r.text
        assert r.headers["x-compute-tokens"] == "12"
        _tei(_post(u, "/embed_sparse", {"inputs": ["a b"] * 11}), 413, "Validation",
             "the input has 44 tokens; this gateway takes at most 40 per request (--max-request-tokens)")
        info = httpx.get(u + "/info", timeout=30).json()   # TEI's /info of the only model (#69: every kind answers it)
        assert (info["model_id"], info["model_type"], info["max_batch_tokens"]) == \
            (manifest.name, {"embedding": {"pooling": "splade"}}, 40)


def test_over_the_concurrency_cap_a_sparse_request_is_429(repo, manifest, splade_server, minilm_repo, minilm_server,
                                                         corpus, tmp_path):
    """The cap is the gateway's: a large embeddings request holding the only slot makes a sparse request 429."""
    with gateway(repo, tmp_path / "gw.log", str(minilm_repo), "--triton", minilm_server.grpc_url,
                 *_pools(manifest, splade_server.grpc_url), "--max-concurrent-requests", "1",
                 "--request-timeout", "600") as u:
        done: dict[str, float] = {}
        errors: list[BaseException] = []
        t: threading.Thread = _big(u, 96, corpus, done, "big", errors)
        until(lambda: _metric(u, "embtrt_gateway_requests_in_flight") == 1 or errors, 60, "the large request admitted")
        r = _post(u, "/v1/sparse", {"model": manifest.name, "input": "a"})
        t.join(600)
        assert not errors, errors
        err = _envelope(r, 429, "serving its limit of 1 concurrent requests")
        assert err["code"] == "too_many_requests" and r.headers["retry-after"] == "1" and "big" in done
        assert _post(u, "/embed_sparse", {"inputs": "a"}).status_code == 200
