"""Multi-vector models behind `embtrt gateway` (#52): late interaction on the rerank routes (MaxSim equal to
MultiVectorEncoder.similarity, bge-m3's compute_score modes equal to FlagEmbedding's), token vectors on
TEI's /embed_all and vLLM's /pooling, bge-m3's three outputs on /v1/encode (equal to BGEM3FlagModel.encode),
the vector-bytes cap (413 naming --max-vector-bytes), and bad bodies answered in each route's shape while
serving goes on. The session's multi-vector server (colbert, m3), --default-model colbert."""

import base64

import httpx
import numpy as np
import pytest

from test_gateway import gateway

pytestmark = pytest.mark.integration
TOL = 1e-4


@pytest.fixture(scope="module")
def url(multivector_repos, multivector_server, tmp_path_factory):
    repos = [multivector_repos["colbert"], multivector_repos["m3"]]
    with gateway(repos[0], tmp_path_factory.mktemp("gw-mv") / "gw.log", str(repos[1]), "--triton",
                 multivector_server.grpc_url, "--default-model", "colbert", "--max-items", "64",
                 "--max-vector-bytes", str(1 << 20)) as u:
        yield u


@pytest.fixture(scope="module")
def mve(multivectors):
    from sentence_transformers import MultiVectorEncoder

    return MultiVectorEncoder(str(multivectors["colbert"]), device="cpu")


@pytest.fixture(scope="module")
def m3(multivectors):
    from tiny_multivector import flag_m3

    return flag_m3(multivectors["m3"])


@pytest.fixture(scope="module")
def docs(corpus):
    return [t for t in corpus if len(t) < 300][:8] + ["Hello, world!"]


def _post(url, path, body):
    r = httpx.post(url + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_info_describes_the_default_model(url, multivector_repos):
    """TEI's /info (#69: every kind answers it) of --default-model, the ColBERT model."""
    from embtrt.repository.manifest import read_manifest

    info = httpx.get(url + "/info", timeout=30).json()
    m = read_manifest(multivector_repos["colbert"])
    assert (info["model_id"], info["model_type"], info["max_input_length"]) == \
        ("colbert", {"embedding": {"pooling": "multi-vector (colbert)"}}, m.max_seq_length)


def test_rerank_routes_rank_by_maxsim_as_multivectorencoder(url, mve, docs):
    query = "what do people read?"
    want = mve.similarity(mve.encode_query([query]), mve.encode_document(docs)).numpy()[0]
    cohere = _post(url, "/v1/rerank", {"model": "colbert", "query": query, "documents": docs})
    got = np.array([r["relevance_score"] for r in sorted(cohere["results"], key=lambda r: r["index"])])
    assert np.abs(got - want).max() <= TOL
    assert [r["index"] for r in cohere["results"]] == np.argsort(-want, kind="stable").tolist()
    assert cohere["usage"]["prompt_tokens"] > 32   # the query's tokens and every document's
    tei = _post(url, "/rerank", {"query": query, "texts": docs, "raw_scores": True})   # activation flags do not apply
    assert max(abs(r["score"] - want[r["index"]]) for r in tei) <= TOL
    nim = _post(url, "/v1/ranking", {"model": "colbert", "query": {"text": query}, "passages": [{"text": d} for d in docs],
                                     "truncate": "END"})   # NIM cuts only when asked
    assert max(abs(r["logit"] - want[r["index"]]) for r in nim["rankings"]) <= TOL
    score = _post(url, "/score", {"model": "colbert", "text_1": query, "text_2": docs})
    assert max(abs(d["score"] - want[d["index"]]) for d in score["data"]) <= TOL


def test_bge_m3_ranks_by_compute_score_in_the_mode_asked(url, m3, docs):
    query = docs[0][:40]
    # one pair per call: compute_score pads a batch's passages, whose zero rows would join its ColBERT max
    want = [m3.compute_score([query, d], max_query_length=64, max_passage_length=64) for d in docs]
    for mode, weights in (("colbert+sparse+dense", None), ("dense", None), ("sparse", None), ("colbert", None),
                          ("sparse+dense", [0.4, 0.2, 0.4]), ("colbert+sparse+dense", [0.4, 0.2, 0.4])):
        if weights is not None:
            want_m = [m3.compute_score([query, d], max_query_length=64, max_passage_length=64,
                                       weights_for_different_modes=weights)[mode] for d in docs]
        else:
            want_m = [w[mode] for w in want]
        body = {"model": "m3", "query": query, "documents": docs, **({"mode": mode} if mode != "colbert+sparse+dense" else {}),
                **({"weights": weights} if weights else {})}
        res = _post(url, "/v1/rerank", body)["results"]
        got = [r["relevance_score"] for r in sorted(res, key=lambda r: r["index"])]
        assert np.abs(np.array(got) - np.array(want_m)).max() <= TOL, mode


def test_token_vectors_on_embed_all_and_pooling(url, mve, docs):
    want_d = mve.encode_document(docs, convert_to_numpy=True)
    want_q = mve.encode_query(docs[:3], convert_to_numpy=True)
    tei = httpx.post(url + "/embed_all", json={"inputs": docs}, timeout=60)
    assert tei.status_code == 200 and int(tei.headers["x-compute-tokens"]) > len(docs)
    for got, want in zip(tei.json(), want_d, strict=True):
        assert np.asarray(got).shape == want.shape and np.abs(np.asarray(got) - want).max() <= TOL
    pool = _post(url, "/pooling", {"model": "colbert", "input": docs[:3], "task": "token_embed", "embedding_mode": "query"})
    assert pool["object"] == "list" and [d["object"] for d in pool["data"]] == ["pooling"] * 3
    for d, want in zip(pool["data"], want_q, strict=True):
        assert np.abs(np.asarray(d["data"]) - want).max() <= TOL
    b64 = _post(url, "/pooling", {"input": docs[:2], "encoding_format": "base64", "embed_dtype": "float16"})
    for d, want in zip(b64["data"], want_d[:2], strict=True):
        got = np.frombuffer(base64.b64decode(d["data"]), dtype="<f2").reshape(-1, 128)
        assert got.shape == want.shape and np.abs(got.astype(np.float32) - want).max() <= 1e-3


def test_v1_encode_gives_bge_m3s_three_outputs_from_one_call(url, m3, docs):
    want = m3.encode(docs, max_length=64, return_dense=True, return_sparse=True, return_colbert_vecs=True)
    got = _post(url, "/v1/encode", {"model": "m3", "input": docs, "return_sparse": True, "return_colbert_vecs": True})
    assert got["usage"]["prompt_tokens"] > len(docs)
    for row, dense, lex, col in zip(got["data"], want["dense_vecs"], want["lexical_weights"], want["colbert_vecs"], strict=True):
        assert np.abs(np.asarray(row["dense_vecs"]) - dense).max() <= TOL
        assert set(row["lexical_weights"]) == set(lex)
        assert max((abs(row["lexical_weights"][k] - float(lex[k])) for k in lex), default=0.0) <= TOL
        assert np.asarray(row["colbert_vecs"]).shape == col.shape
        assert np.abs(np.asarray(row["colbert_vecs"]) - col).max() <= TOL
    only = _post(url, "/v1/encode", {"model": "m3", "input": docs[0], "return_dense": False, "return_sparse": True})
    assert set(only["data"][0]) == {"index", "lexical_weights"}


def test_bad_requests_and_the_vector_bytes_cap(url, corpus):
    long = [" ".join(corpus[i:i + 4]) for i in range(60)]   # 60 documents of 48 tokens x 128 x 4 B > 1 MiB
    big = httpx.post(url + "/pooling", json={"input": long}, timeout=60)
    assert big.status_code == 413 and "--max-vector-bytes" in big.json()["error"]["message"]
    emb = httpx.post(url + "/v1/embeddings", json={"model": "colbert", "input": ["x"]}, timeout=30)
    assert emb.status_code == 400 and emb.json()["error"]["code"] == "wrong_model_kind"
    task = httpx.post(url + "/pooling", json={"input": ["x"], "task": "embed"}, timeout=30)
    assert task.status_code == 400 and task.json()["error"]["type"] == "BadRequestError"   # vLLM's shape
    mode = httpx.post(url + "/v1/rerank", json={"model": "colbert", "query": "q", "documents": ["d"], "mode": "dense"}, timeout=30)
    assert mode.status_code == 400 and mode.json()["error"]["param"] == "mode"
    bad = httpx.post(url + "/v1/rerank", json={"model": "m3", "query": "q", "documents": ["d"], "mode": "lexical"}, timeout=30)
    assert bad.status_code == 400 and "colbert+sparse+dense" in bad.json()["error"]["message"]
    zero = httpx.post(url + "/v1/rerank", json={"model": "m3", "query": "q", "documents": ["d"], "mode": "colbert",
                                                "weights": [1, 1, 0]}, timeout=30)   # colbert's own weight 0: no score
    assert zero.status_code == 400 and zero.json()["error"]["param"] == "weights"
    assert _post(url, "/v1/rerank", {"model": "m3", "query": "q", "documents": ["d"], "mode": "colbert",
                                     "weights": [0, 0, 1]})["results"][0]["index"] == 0
    colbert_dense = httpx.post(url + "/v1/encode", json={"model": "colbert", "input": ["x"], "return_dense": True}, timeout=30)
    assert colbert_dense.status_code == 400 and colbert_dense.json()["error"]["param"] == "return_dense"
    tei = httpx.post(url + "/embed_all", json={"inputs": []}, timeout=30)
    assert tei.status_code == 400 and tei.json()["error_type"] == "Empty"
    assert _post(url, "/pooling", {"input": ["still served"]})["data"][0]["index"] == 0


def test_bge_m3_dense_and_lexical_weights_on_the_embed_and_sparse_routes(url, m3, docs):
    want = m3.encode(docs, max_length=64, return_dense=True, return_sparse=True)
    openai = _post(url, "/v1/embeddings", {"model": "m3", "input": docs})
    got = np.array([d["embedding"] for d in openai["data"]])
    assert np.abs(got - want["dense_vecs"]).max() <= TOL and openai["usage"]["prompt_tokens"] > len(docs)
    tei = _post(url, "/embed", {"inputs": docs[:2]})   # the only model serving embed: m3
    assert np.abs(np.array(tei) - want["dense_vecs"][:2]).max() <= TOL
    half = _post(url, "/v1/embeddings", {"model": "m3", "input": docs[:2], "dimensions": 16})["data"][0]["embedding"]
    cut = want["dense_vecs"][0][:16] / np.linalg.norm(want["dense_vecs"][0][:16])
    assert np.abs(np.array(half) - cut).max() <= TOL   # a width: the first d components, normalised again
    sparse = _post(url, "/v1/sparse", {"model": "m3", "input": docs, "return_tokens": True})
    for row, lex in zip(sparse["data"], want["lexical_weights"], strict=True):
        assert [str(i) for i in row["indices"]] == sorted(lex, key=int)   # the same token ids
        assert max(abs(v - float(lex[str(i)])) for i, v in zip(row["indices"], row["values"], strict=True)) <= TOL
        assert len(row["tokens"]) == len(row["indices"]) and all(isinstance(t, str) for t in row["tokens"])
    top = _post(url, "/embed_sparse", {"inputs": docs[0]})[0]
    assert {str(d["index"]) for d in top} == set(want["lexical_weights"][0])
    one = _post(url, "/v1/sparse", {"model": "m3", "input": [docs[0]], "max_active_dims": 2})["data"][0]
    best = sorted(want["lexical_weights"][0].items(), key=lambda kv: -kv[1])[:2]
    assert sorted(one["indices"]) == sorted(int(k) for k, _ in best)
    ids = httpx.post(url + "/v1/embeddings", json={"model": "m3", "input": [[5, 6, 7]]}, timeout=30)
    assert ids.status_code == 400
