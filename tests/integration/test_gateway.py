"""`embtrt gateway` in front of real tritonservers, driven by the official `openai` client.

Pools: the session's full server (A) serves the 32- and 128-token buckets; a second
tritonserver (B) serves only the long pool's encoder (explicit model control). The gateway
runs as its own process (`embtrt gateway`, uvicorn) on a free loopback port.
"""

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest

from embtrt.reference.parity import cosine_rows
from embtrt.serve.server import ServerSpec, TritonServer, free_port

pytestmark = pytest.mark.integration
NAME = "all_minilm_l6_v2"


@contextmanager
def gateway(repo: Path, log: Path, *args: str, env: dict | None = None):
    port = free_port()
    with open(log, "ab") as fh:
        p = subprocess.Popen([sys.executable, "-m", "embtrt.cli", "gateway", str(repo), "--port", str(port), *args],
                             stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/health/live", timeout=1)
                break
            except OSError:
                if p.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"gateway did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        yield url
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def pool_server(repo: Path, tmp: Path, models: tuple[str, ...], grpc_port: int | None = None) -> TritonServer:
    return TritonServer(ServerSpec(repo, grpc_port=grpc_port or free_port(), http_port=free_port(),
                                   metrics_port=free_port(), log_file=tmp / f"pool-{time.time_ns()}.log", models=models,
                                   graceful_exit=False))


@pytest.fixture(scope="module")
def long_pool(minilm_repo, tmp_path_factory):
    with pool_server(minilm_repo, tmp_path_factory.mktemp("long"), (f"{NAME}_256_encoder",)) as srv:
        yield srv


@pytest.fixture(scope="module")
def two_pools(minilm_repo, minilm_server, long_pool, tmp_path_factory):
    a, b = minilm_server.grpc_url, long_pool.grpc_url
    with gateway(minilm_repo, tmp_path_factory.mktemp("gw") / "gw.log", "--pool", f"32={a}", "--pool", f"128={a}",
                 "--pool", f"256={b}", "--token-ids") as url:
        yield url


@pytest.fixture(scope="module")
def tokenizer(minilm_repo):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(minilm_repo / NAME / "1" / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=256)
    return tok


@pytest.fixture(scope="module")
def reference(corpus, minilm_path):
    from embtrt.reference.torch_ref import st_embed

    return st_embed(minilm_path, corpus)


def test_openai_client_gets_sentence_transformers_vectors_in_order_with_exact_usage(two_pools, corpus, reference,
                                                                                     tokenizer):
    from openai import OpenAI

    c = OpenAI(base_url=two_pools + "/v1", api_key="unused")
    got, usage = [], 0
    for i in range(0, len(corpus), 64):  # batched, default encoding (the client asks for base64)
        r = c.embeddings.create(model=NAME, input=corpus[i:i + 64])
        assert [d.index for d in r.data] == list(range(len(r.data)))
        got += [d.embedding for d in r.data]
        usage += r.usage.prompt_tokens
        assert r.usage.total_tokens == r.usage.prompt_tokens and r.model == NAME
    got = np.asarray(got, dtype=np.float32)
    assert len(corpus) >= 300 and got.shape == reference.shape
    assert cosine_rows(reference, got).min() >= 0.9999
    assert usage == sum(len(e.ids) for e in tokenizer.encode_batch(corpus))  # after truncation, specials included
    lens = [len(e.ids) for e in tokenizer.encode_batch(corpus)]
    assert all(any(lo < n <= hi for n in lens) for lo, hi in ((0, 32), (32, 128), (128, 256)))  # every bucket, both pools
    singles = [i for i in range(0, len(corpus), 25)]
    for i in singles:  # one text per request, float
        r = c.embeddings.create(model=NAME, input=corpus[i], encoding_format="float")
        assert len(r.data) == 1 and r.usage.prompt_tokens == lens[i]
        assert cosine_rows(reference[i:i + 1], np.asarray([r.data[0].embedding]))[0] >= 0.9999
        assert np.allclose(r.data[0].embedding, got[i], atol=1e-6)


def test_token_id_input_gives_the_same_vectors_as_the_text(two_pools, corpus, tokenizer, reference):
    from openai import OpenAI

    c = OpenAI(base_url=two_pools + "/v1", api_key="unused")
    pick = corpus[::20]
    ids = [e.ids for e in tokenizer.encode_batch(pick)]
    r = c.embeddings.create(model=NAME, input=ids, encoding_format="float")
    got = np.asarray([d.embedding for d in r.data])
    assert cosine_rows(reference[::20], got).min() >= 0.9999
    assert r.usage.prompt_tokens == sum(map(len, ids))
    one = c.embeddings.create(model=NAME, input=ids[3], encoding_format="float")
    assert np.allclose(one.data[0].embedding, got[3], atol=1e-6)


def _post(url: str, body, headers: dict | None = None, raw: bytes | None = None) -> httpx.Response:
    return httpx.post(url + "/v1/embeddings", content=raw if raw is not None else json.dumps(body),
                      headers={"content-type": "application/json", **(headers or {})}, timeout=30)


def _tei(r: httpx.Response, status: int, error_type: str, contains: str) -> dict:
    """TEI's error body on TEI's routes (#51): {error, error_type} with TEI 1.9's status."""
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == error_type and contains in body["error"], body
    return body


def _envelope(r: httpx.Response, status: int, contains: str) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and contains in err["message"], err
    return err


def test_bad_requests_get_openais_envelope_and_status(two_pools):
    u = two_pools
    # #72: a refused request that names its model is counted under it (was: not counted per model)
    series = f'embtrt_gateway_model_requests_total{{model="{NAME}",status="400"}}'
    before = _metric(u, series)
    _envelope(_post(u, {"model": NAME, "input": []}), 400, "non-empty list")
    _envelope(_post(u, {"model": NAME + "-query", "input": []}), 400, "non-empty list")
    assert _metric(u, series) == before + 2
    _envelope(_post(u, {"input": "x"}), 400, "model parameter")
    assert _envelope(_post(u, {"model": "nope", "input": "x"}), 404, "does not exist")["code"] == "model_not_found"
    _envelope(_post(u, {"model": NAME, "input": []}), 400, "non-empty list")
    _envelope(_post(u, {"model": NAME, "input": 5}), 400, "input must be")
    _envelope(_post(u, {"model": NAME, "input": ["a", 3]}), 400, "must all be strings")
    _envelope(_post(u, {"model": NAME, "input": ["a"] * 2049}), 400, "at most 2048")
    _envelope(_post(u, {"model": NAME, "input": [[101, 99999999]]}), 400, "outside the vocabulary")
    _envelope(_post(u, {"model": NAME, "input": [list(range(1000, 1300))]}), 400, "at most 256")
    _envelope(_post(u, {"model": NAME, "input": "x", "encoding_format": "int8"}), 400, "encoding_format")
    err = _envelope(_post(u, {"model": NAME, "input": "x", "dimensions": 385}), 400, "any width from 1 to 384")
    assert err["param"] == "dimensions"
    assert len(_post(u, {"model": NAME, "input": "x", "dimensions": 128}).json()["data"][0]["embedding"]) == 128
    assert _post(u, {"model": NAME, "input": "x", "dimensions": 384}).status_code == 200
    _envelope(_post(u, None, raw=b"{not json"), 400, "not valid JSON")
    # a bad request never hides or reorders the good ones sent beside it
    good = ["first text", "second, longer text about embeddings", "third"]
    with httpx.Client(timeout=30) as hc:
        rs = [hc.post(u + "/v1/embeddings", json=b) for b in
              ({"model": NAME, "input": good}, {"model": NAME, "input": []}, {"model": NAME, "input": good[::-1]})]
    assert [r.status_code for r in rs] == [200, 400, 200]
    a = np.array([d["embedding"] for d in rs[0].json()["data"]])
    b = np.array([d["embedding"] for d in rs[2].json()["data"]])
    assert np.allclose(a, b[::-1], atol=1e-6)


def test_a_misspelt_option_is_refused_in_each_dialect_and_other_unknown_fields_are_ignored(two_pools):
    """#73: `dimension` or `prompt_nme` answered 200 at full width; each dialect now refuses a field one or
    two letters off an option, in its own error shape, naming the option; a field no option resembles is
    ignored, as TEI's and vLLM's servers ignore it (the vector is the plain request's)."""
    from openai import BadRequestError, OpenAI

    u = two_pools
    err = _envelope(_post(u, {"model": NAME, "input": "x", "dimension": 10}), 400, "did you mean 'dimensions'")
    assert err["param"] == "dimension"
    with pytest.raises(BadRequestError, match="did you mean 'prompt_name'"):
        OpenAI(base_url=u + "/v1", api_key="-", max_retries=0).embeddings.create(
            model=NAME, input=["x"], extra_body={"prompt_nme": "query"})
    _tei(httpx.post(u + "/embed", json={"inputs": "x", "dimension": 10}, timeout=30), 422, "Validation",
         "did you mean 'dimensions'")
    r = httpx.post(u + "/v2/embed", json={"model": NAME, "texts": ["x"], "input_type": "search_query",
                                          "embedding_types": ["float"], "output_dimensions": 8}, timeout=30)
    assert r.status_code == 400 and "did you mean 'output_dimension'" in r.json()["message"], r.text
    r = httpx.post(u + "/detokenize", json={"model": NAME, "tokens": [101, 102], "dimension": 3}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError", r.text   # vLLM's shape
    assert "did you mean 'dimensions'" in r.json()["error"]["message"], r.text
    plain = _post(u, {"model": NAME, "input": "x"}).json()["data"][0]["embedding"]
    extra = _post(u, {"model": NAME, "input": "x", "service_tier": "default"})
    assert extra.status_code == 200 and extra.json()["data"][0]["embedding"] == plain


def test_an_unknown_route_names_the_routes_served_and_a_wrong_method_is_405_with_allow(two_pools):
    """The route table (#50): an embedder-only gateway's 404 names its routes (not the rerank or sparse
    ones, which no model here serves), in the gateway's envelope; a known path asked with another
    method is a 405 naming the methods it takes."""
    u = two_pools
    err = _envelope(httpx.post(u + "/v1/embedding", json={"model": NAME, "input": "x"}), 404,
                    "no route POST /v1/embedding; this gateway serves POST /v1/embeddings, POST /embeddings, POST /embed, "
                    "POST /similarity, POST /v1/embed, POST /v2/embed, POST /embed_all, POST /pooling, POST /tokenize, "
                    "POST /decode, POST /detokenize, "
                    "GET /v1/models, GET /v1/models/{id}, GET /health/live, GET /health/ready, GET /health, GET /ping, "
                    "GET /, POST /, GET /info, GET /v1/health/ready, GET /v1/health/live, GET /v1/metadata, GET /metrics, "
                    "GET /v1/metrics")
    assert err["code"] == "unknown_route" and "rerank" not in err["message"] and "sparse" not in err["message"]
    r = httpx.get(u + "/v1/embeddings")
    assert _envelope(r, 405, "/v1/embeddings takes POST, not GET")["code"] == "method_not_allowed"
    assert r.headers["allow"] == "POST"
    r = httpx.delete(u + "/v1/models")
    _envelope(r, 405, "/v1/models takes GET, not DELETE")
    assert r.headers["allow"] == "GET"
    assert httpx.get(u + "/health/live").status_code == 200
    assert httpx.get(u + "/v1/models").json()["data"][0]["id"] == NAME


def test_openai_models_retrieve_and_tei_health_checks(two_pools):
    """openai's models.retrieve (GET /v1/models/{id}) gets the model's /v1/models entry, and an unknown
    model OpenAI's 404 (model_not_found); TEI's health checks (GET /health, /ping, /) answer 200 with
    no body while the pools answer (#51)."""
    import openai

    c = openai.OpenAI(base_url=two_pools + "/v1", api_key="unused")
    m = c.models.retrieve(NAME)
    listed = httpx.get(two_pools + "/v1/models").json()["data"][0]
    assert (m.id, m.object, m.owned_by, m.created) == (NAME, "model", "embtrt", 0)
    got = m.model_dump()   # the client's model of the entry: every field of the entry, as listed
    assert {k: got.get(k) for k in listed} == listed
    with pytest.raises(openai.NotFoundError) as e:
        c.models.retrieve("no_such_model")
    assert e.value.status_code == 404 and e.value.code == "model_not_found" and NAME in e.value.message
    for path in ("/health", "/ping", "/"):
        r = httpx.get(two_pools + path)
        assert r.status_code == 200 and r.content == b"", (path, r.status_code, r.content)
    r = httpx.post(two_pools + "/health")
    assert r.status_code == 405 and r.headers["allow"] == "GET"


def test_api_key_and_body_limit(minilm_repo, minilm_server, tmp_path):
    with gateway(minilm_repo, tmp_path / "gw.log", "--triton", minilm_server.grpc_url, "--api-key-env", "EMBTRT_KEY",
                 "--max-body-bytes", "2000", env={"EMBTRT_KEY": "s3cret"}) as u:
        _envelope(_post(u, {"model": NAME, "input": "x"}), 401, "API key")
        _envelope(_post(u, {"model": NAME, "input": "x"}, {"authorization": "Bearer wrong"}), 401, "API key")
        ok = _post(u, {"model": NAME, "input": "x"}, {"authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        _envelope(_post(u, {"model": NAME, "input": "y" * 5000}, {"authorization": "Bearer s3cret"}), 413, "over the limit")
        assert httpx.get(u + "/v1/models").status_code == 401
        models = httpx.get(u + "/v1/models", headers={"authorization": "Bearer s3cret"}).json()
        assert models["data"][0]["id"] == NAME
        # the anchors' routes (#51): the key on every model route and on what names the models (TEI's /info,
        # NIM's metadata); health checks and metrics without it, as TEI and NIM; POST / over the size limit: 413
        key = {"authorization": "Bearer s3cret"}
        assert httpx.post(u + "/embed", json={"inputs": "x"}).json() == {"error": "incorrect or missing API key (send "
                                                                          "Authorization: Bearer <key>)",
                                                                          "error_type": "Unauthorized"}
        assert httpx.post(u + "/", json={"inputs": "x"}).status_code == 401
        assert httpx.post(u + "/", json={"inputs": "x"}, headers=key).status_code == 200
        assert httpx.post(u + "/", json={"inputs": "y" * 5000}, headers=key).status_code == 413
        assert httpx.get(u + "/info").status_code == 401 and httpx.get(u + "/info", headers=key).status_code == 200
        assert httpx.get(u + "/v1/metadata").status_code == 401
        assert httpx.get(u + "/v1/metadata", headers=key).status_code == 200
        assert httpx.get(u + "/health").status_code == httpx.get(u + "/v1/health/ready").status_code == 200


def test_queue_full_is_429_and_reject_mode_overflow_is_400(tiny_models, tmp_path):
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    repo = tmp_path / "tiny"
    build(spec_from_options(tiny_models["bert-cls"], repo, name="bert", max_queue_size=1, max_queue_delay_us=3_000_000,
                            max_batch_size=16, preferred_batch_sizes="16", overflow="reject"), log=lambda m: None)
    encoders = tuple(json.loads((repo / "embtrt.json").read_text())["models"]["encoders"])
    with pool_server(repo, tmp_path, encoders) as srv, \
            gateway(repo, tmp_path / "gw.log", "--triton", srv.grpc_url) as u:
        _envelope(_post(u, {"model": "bert", "input": "word " * 200}), 400, "--overflow reject")

        async def burst():
            async with httpx.AsyncClient(timeout=30) as hc:
                return await asyncio.gather(*[hc.post(u + "/v1/embeddings", json={"model": "bert", "input": f"text {i}"})
                                              for i in range(8)])

        rs = asyncio.run(burst())
        codes = sorted(r.status_code for r in rs)
        assert 429 in codes and 200 in codes, codes
        err = _envelope(next(r for r in rs if r.status_code == 429), 429, "full queue")
        assert err["code"] == "queue_full" and err["type"] == "rate_limit_error"


def _metric(url: str, name: str) -> float:
    """The sum of the series that start with `name`; a family the gateway does not declare (a missing
    or renamed metric) is an error, never 0. A declared family's series not yet seen count 0."""
    text = httpx.get(url + "/metrics").text
    family = re.sub(r"_(total|count|sum|bucket|created)$", "", name.split("{")[0])
    declared = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    assert family in declared or f"{family}_total" in declared, f"the gateway exports no metric {family!r}"
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_a_stopped_pool_gives_503_for_its_bucket_while_the_other_answers_and_recovers(minilm_repo, minilm_server,
                                                                                     corpus, tmp_path):
    long_text = max(corpus, key=len)
    port = free_port()
    srv = pool_server(minilm_repo, tmp_path, (f"{NAME}_256_encoder",), grpc_port=port)
    srv.start()
    srv.wait_ready()
    try:
        with gateway(minilm_repo, tmp_path / "gw.log", "--triton", minilm_server.grpc_url,
                     "--pool", f"256=127.0.0.1:{port}") as u:
            assert _post(u, {"model": NAME, "input": long_text}).status_code == 200
            assert httpx.get(u + "/health/ready").status_code == 200
            srv.stop()
            r = _post(u, {"model": NAME, "input": long_text})
            err = _envelope(r, 503, "the model's servers are unavailable; retry later")
            assert err["code"] == "pool_unavailable" and r.headers["retry-after"] == "2"
            assert "127.0.0.1" not in r.text and "bucket" not in r.text  # no internal address or topology
            assert f"pool <=256 (bucket 256, 127.0.0.1:{port}) is unavailable" in (tmp_path / "gw.log").read_text()
            assert _post(u, {"model": NAME, "input": "a short query"}).status_code == 200
            ready = httpx.get(u + "/health/ready")
            assert ready.status_code == 503
            assert ready.json()["pools"]["<=128"] == "ok" and ready.json()["pools"]["<=256"] != "ok"
            assert _metric(u, 'embtrt_gateway_errors_total{status="503"}') >= 1
            srv = pool_server(minilm_repo, tmp_path, (f"{NAME}_256_encoder",), grpc_port=port)
            srv.start()
            srv.wait_ready()
            deadline = time.time() + 60
            while _post(u, {"model": NAME, "input": long_text}).status_code != 200:
                assert time.time() < deadline, "the pool did not come back"
                time.sleep(1)
            assert httpx.get(u + "/health/ready").status_code == 200
            assert _metric(u, 'embtrt_gateway_tokens_total{pool="<=256"}') > 0
    finally:
        srv.stop()


def test_killing_one_replica_mid_load_fails_no_request(minilm_repo, minilm_server, long_pool, corpus, reference, tmp_path):
    from openai import AsyncOpenAI

    short = [(i, t) for i, t in enumerate(corpus) if len(t) < 300][:60]
    replica = pool_server(minilm_repo, tmp_path, (f"{NAME}_32_encoder", f"{NAME}_128_encoder"))
    with replica:
        a, c = minilm_server.grpc_url, replica.grpc_url
        with gateway(minilm_repo, tmp_path / "gw.log", "--pool", f"32={a},{c}", "--pool", f"128={a},{c}",
                     "--pool", f"256={long_pool.grpc_url}") as u:
            client = AsyncOpenAI(base_url=u + "/v1", api_key="unused", max_retries=0, timeout=60)
            results: list = []

            async def worker(k: int):
                for j in range(k, 480, 32):
                    i, text = short[j % len(short)]
                    r = await client.embeddings.create(model=NAME, input=[text], encoding_format="float")
                    results.append((i, r.data[0].embedding))
                    if len(results) == 120:
                        os.killpg(replica.proc.pid, signal.SIGKILL)  # one replica dies mid-load

            async def main():
                await asyncio.gather(*[worker(k) for k in range(32)])

            asyncio.run(main())
            assert replica.proc.poll() is not None  # it really died
            retried = _metric(u, "embtrt_gateway_upstream_retries_total")
    assert len(results) == 480  # no failed client request
    idx = [i for i, _ in results]
    got = np.asarray([v for _, v in results])
    assert cosine_rows(reference[idx], got).min() >= 0.9999
    assert retried >= 1


@pytest.mark.parametrize("route", ["auto", "ids"])
def test_concurrent_requests_are_coalesced_and_each_gets_its_own_vectors_in_order(route, minilm_repo, minilm_server,
                                                                                  corpus, reference, tokenizer, tmp_path):
    """32 concurrent requests of 1-3 short texts: fewer upstream calls than requests, every request
    its own vectors in its own order (equal to sentence-transformers); bad requests sent among them
    (ids outside the vocabulary, an over-long text with truncate NONE, a bad option) fail alone; a
    client that goes away mid-flight costs the others nothing. auto on one server is the front door
    route (texts to the front door, but for a request that finds none in flight); ids sends token ids to the
    bucket encoders."""
    lens = [len(e.ids) for e in tokenizer.encode_batch(corpus)]
    short = [i for i, n in enumerate(lens) if n <= 32][:96]
    long_i = max(range(len(corpus)), key=lambda i: len(corpus[i]))  # far over 256 tokens
    taken = "frontdoor" if route == "auto" else "ids"
    counter = f'embtrt_gateway_upstream_rows_count{{pool="all",route="{taken}"}}'
    with gateway(minilm_repo, tmp_path / "gw.log", "--triton", minilm_server.grpc_url, "--route", route) as u:
        if route == "auto":   # auto takes the front door once its readiness answers (asked again every 5 s after a
            # failed ask, e.g. a busy server): pairs of concurrent requests until one went there, at most 30 s
            deadline = time.time() + 30
            while _metric(u, counter) == 0 and time.time() < deadline:
                async def pair():
                    async with httpx.AsyncClient(timeout=60) as hc:
                        await asyncio.gather(*(hc.post(u + "/v1/embeddings", json={"model": NAME, "input": "x"})
                                               for _ in range(2)))
                asyncio.run(pair())
                time.sleep(0.5)
        calls0 = _metric(u, counter)

        async def run():
            async with httpx.AsyncClient(timeout=60) as hc, httpx.AsyncClient(timeout=0.002) as impatient:
                async def good(k):
                    rows = [short[(k * 3 + j) % len(short)] for j in range(1 + k % 3)]
                    r = await hc.post(u + "/v1/embeddings", json={"model": NAME, "input": [corpus[i] for i in rows],
                                                                "encoding_format": "float"})
                    return rows, r

                async def gone(k):  # the client disconnects before its answer
                    try:
                        await impatient.post(u + "/v1/embeddings", json={"model": NAME, "input": [corpus[short[k]]] * 4})
                    except httpx.TimeoutException:
                        return "gone"
                    return "answered"

                bad = [hc.post(u + "/v1/embeddings", json=b) for b in (
                    {"model": NAME, "input": [[101, 99999999, 102]]},
                    {"model": NAME, "input": [corpus[long_i]], "truncate": "NONE"},
                    {"model": NAME, "input": ["x"], "dimensions": 0})]
                big = hc.post(u + "/v1/embeddings", json={"model": NAME, "input": [corpus[i] for i in short[:70]],
                                                          "encoding_format": "float"})  # over the max batch of 32
                return await asyncio.gather(*[good(k) for k in range(32)], *[gone(k) for k in range(4)], *bad, big)

        res = asyncio.run(run())
        goods, gone, bads, big = res[:32], res[32:36], res[36:39], res[39]
        assert gone == ["gone"] * 4, gone   # each of these clients left before its answer came
        assert big.status_code == 200, big.text
        assert cosine_rows(reference[short[:70]], np.asarray([d["embedding"] for d in big.json()["data"]])).min() >= 0.9999
        assert big.json()["usage"]["prompt_tokens"] == sum(lens[i] for i in short[:70])
        for rows, r in goods:
            assert r.status_code == 200, r.text
            got = np.asarray([d["embedding"] for d in r.json()["data"]], dtype=np.float32)
            assert [d["index"] for d in r.json()["data"]] == list(range(len(rows)))
            assert cosine_rows(reference[rows], got).min() >= 0.9999
            # each request's own usage, though its texts went up in a shared call (frontdoor: TOKENS of the front door)
            assert r.json()["usage"]["prompt_tokens"] == sum(lens[i] for i in rows)
        assert [r.status_code for r in bads] == [400, 400, 400]
        assert [r.json()["error"]["param"] for r in bads] == ["input", "input", "dimensions"]
        calls = _metric(u, counter) - calls0
        assert 0 < calls < 32, calls  # coalesced, by the route asked for: fewer upstream calls than requests
        # and the gateway serves on, correctly, holding nothing for the clients that left
        r = _post(u, {"model": NAME, "input": [corpus[short[0]]], "encoding_format": "float"})
        assert cosine_rows(reference[short[:1]], np.asarray([r.json()["data"][0]["embedding"]]))[0] >= 0.9999
        deadline = time.time() + 60
        while _metric(u, "embtrt_gateway_requests_in_flight") != 0 and time.time() < deadline:
            time.sleep(0.05)
        assert _metric(u, "embtrt_gateway_requests_in_flight") == 0


def test_auto_route_sends_a_lone_request_as_token_ids_and_concurrent_ones_to_the_front_door(
        minilm_repo, minilm_server, corpus, tokenizer, reference, tmp_path):
    """--route auto on one server: a request that arrives while no other is in flight takes the lowest-latency
    path (token ids to its bucket's encoder, as the gateway before the front-door route), requests that arrive
    while others are in flight go to the front door; both give sentence-transformers' vectors and exact usage."""
    lens = [len(e.ids) for e in tokenizer.encode_batch(corpus)]
    short = [i for i, n in enumerate(lens) if n <= 32][:32]
    ids_calls, door_calls = ('embtrt_gateway_upstream_rows_count{pool="all",route="ids"}',
                             'embtrt_gateway_upstream_rows_count{pool="all",route="frontdoor"}')
    with gateway(minilm_repo, tmp_path / "gw.log", "--triton", minilm_server.grpc_url) as u:
        i0, d0 = _metric(u, ids_calls), _metric(u, door_calls)
        for i in short[:3]:  # one at a time
            r = _post(u, {"model": NAME, "input": [corpus[i]], "encoding_format": "float"})
            assert r.json()["usage"]["prompt_tokens"] == lens[i]
            assert cosine_rows(reference[[i]], np.asarray([r.json()["data"][0]["embedding"]]))[0] >= 0.9999
        assert (_metric(u, ids_calls) - i0, _metric(u, door_calls) - d0) == (3, 0)

        async def together():
            async with httpx.AsyncClient(timeout=60) as hc:
                return await asyncio.gather(*(hc.post(u + "/v1/embeddings", json={
                    "model": NAME, "input": [corpus[i]], "encoding_format": "float"}) for i in short))

        res = asyncio.run(together())
        got = np.asarray([r.json()["data"][0]["embedding"] for r in res], dtype=np.float32)
        assert cosine_rows(reference[short], got).min() >= 0.9999
        assert [r.json()["usage"]["prompt_tokens"] for r in res] == [lens[i] for i in short]
        assert _metric(u, door_calls) - d0 >= 1  # the requests that found others in flight: the front door


def test_a_front_door_without_token_counts_still_gets_exact_usage(minilm_repo, minilm_server, corpus, tokenizer,
                                                                  reference, tmp_path):
    """A repository built before the front door reported TOKENS: the gateway counts the tokens itself
    (it reads the front door's outputs from the repository it is given)."""
    old = tmp_path / "repo"
    door = old / NAME
    (door / "1").mkdir(parents=True)
    shutil.copy(minilm_repo / "embtrt.json", old / "embtrt.json")
    for f in ("tokenizer.json", "embtrt_calibration.npy"):
        if (minilm_repo / NAME / "1" / f).exists():
            shutil.copy(minilm_repo / NAME / "1" / f, door / "1" / f)
    cfg = (minilm_repo / NAME / "config.pbtxt").read_text()
    tokens_out = re.search(r'  \{\n    name: "TOKENS"\n[^}]*\}', cfg)
    assert tokens_out, "the front door declares TOKENS"
    (door / "config.pbtxt").write_text(cfg.replace(",\n" + tokens_out.group(0), "").replace(tokens_out.group(0), ""))
    assert "TOKENS" not in (door / "config.pbtxt").read_text()
    with gateway(old, tmp_path / "gw.log", "--triton", minilm_server.grpc_url, "--route", "frontdoor") as u:
        r = _post(u, {"model": NAME, "input": corpus[:5], "encoding_format": "float"})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] == sum(len(e.ids) for e in tokenizer.encode_batch(corpus[:5]))
        got = np.asarray([d["embedding"] for d in r.json()["data"]], dtype=np.float32)
        assert cosine_rows(reference[:5], got).min() >= 0.9999
        assert _metric(u, 'embtrt_gateway_upstream_rows_count{pool="all",route="frontdoor"}') >= 1


def test_coalescing_off_sends_one_call_per_request_group(minilm_repo, minilm_server, corpus, tokenizer, tmp_path):
    """--coalesce-us 0: concurrent requests on the front-door route make exactly one upstream call each
    (a request under the front door's max batch is one call), none of them a coalesced one. (On the
    token-id route a request is as many calls as its plan has chunks.)"""
    lens = [len(e.ids) for e in tokenizer.encode_batch(corpus)]
    short = [i for i, n in enumerate(lens) if n <= 32][:24]
    with gateway(minilm_repo, tmp_path / "gw.log", "--triton", minilm_server.grpc_url, "--coalesce-us", "0",
                 "--route", "frontdoor") as u:
        calls0 = _metric(u, "embtrt_gateway_upstream_seconds_count")

        async def together():
            async with httpx.AsyncClient(timeout=60) as hc:
                return await asyncio.gather(*(hc.post(u + "/v1/embeddings", json={
                    "model": NAME, "input": [corpus[i] for i in short[k:k + 3]], "encoding_format": "float"})
                    for k in range(0, len(short), 3)))

        res = asyncio.run(together())
        assert [r.status_code for r in res] == [200] * 8 and all(len(r.json()["data"]) == 3 for r in res)
        assert _metric(u, "embtrt_gateway_upstream_seconds_count") - calls0 == len(res)   # one call per request
        assert _metric(u, "embtrt_gateway_upstream_rows_count") == 0  # the coalescer is off: no batched calls
