"""The anchors' own clients against `embtrt gateway` unmodified (#51): Hugging Face Hub's
InferenceClient (TEI's POST /, as its base URL), Cohere's SDK (Client.embed -> /v1/embed,
ClientV2.embed -> /v2/embed), and plain HTTP for TEI's /embed, /embeddings, /similarity, /tokenize,
/decode, /info and vLLM's /tokenize and /detokenize, NIM's health and metadata; each against the
reference (SentenceTransformer.encode, its similarity, quantize_embeddings, the model's tokenizer),
with every route's own error shape, and serving going on after each error. A real tritonserver
(the session's MiniLM server) behind the gateway."""

import json

import httpx
import numpy as np
import pytest

from embtrt.reference.parity import cosine_rows
from test_gateway import NAME, _envelope, _tei, gateway

pytestmark = pytest.mark.integration
COS = 0.99999


@pytest.fixture(scope="module")
def url(minilm_repo, minilm_server, tmp_path_factory):
    with gateway(minilm_repo, tmp_path_factory.mktemp("gw-anchors") / "gw.log", "--triton", minilm_server.grpc_url,
                 "--token-ids", "--max-items", "64") as u:
        yield u


@pytest.fixture(scope="module")
def texts(corpus):
    return corpus[:12]


@pytest.fixture(scope="module")
def st(minilm_path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path), device="cpu")


def _post(url: str, path: str, body) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=30)


def test_inference_client_features_and_similarity_on_post_root(url, texts, st):
    from huggingface_hub import InferenceClient

    c = InferenceClient(base_url=url)
    ref = st.encode(texts, convert_to_numpy=True)
    got = c.feature_extraction(texts)
    assert got.shape == ref.shape and cosine_rows(got, ref).min() >= COS
    one = c.feature_extraction(texts[3])
    assert one.shape == (1, ref.shape[1]) and cosine_rows(one, ref[3:4]).min() >= COS
    # a Matryoshka width and truncation, sent as InferenceClient's root-level parameters
    narrow = c.feature_extraction(texts, dimensions=64, truncate=True, truncation_direction="right")
    want = st.encode(texts, truncate_dim=64, normalize_embeddings=True)
    assert narrow.shape == (len(texts), 64) and cosine_rows(narrow, want).min() >= COS
    sims = c.sentence_similarity(texts[0], texts[1:])
    want = st.similarity(st.encode(texts[:1]), st.encode(texts[1:]))[0].numpy()
    assert len(sims) == len(texts) - 1 and np.abs(np.array(sims) - want).max() <= 1e-4
    assert np.argsort(sims).tolist() == np.argsort(want).tolist()


def test_tei_embed_embeddings_and_similarity_routes(url, texts, st, minilm_repo):
    from tokenizers import Tokenizer

    ref = st.encode(texts)
    r = _post(url, "/embed", {"inputs": texts, "normalize": True})
    assert r.status_code == 200, r.text
    got = np.array(r.json(), np.float32)
    assert got.shape == ref.shape and cosine_rows(got, ref).min() >= COS
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    # TEI's headers: the tokens the tokenizer counts, the characters, the time
    tok = Tokenizer.from_file(str(minilm_repo / NAME / "1" / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=256)
    assert int(r.headers["x-compute-tokens"]) == sum(len(e.ids) for e in tok.encode_batch(texts))
    assert int(r.headers["x-compute-characters"]) == sum(map(len, texts))
    assert r.headers["x-compute-type"] and int(r.headers["x-total-time"]) >= 0
    # one token-id input (a flat list of ints is one input, as TEI) is the text's vector
    ids = tok.encode(texts[2]).ids
    one = np.array(_post(url, "/embed", {"inputs": ids}).json(), np.float32)
    assert one.shape == (1, ref.shape[1]) and cosine_rows(one, ref[2:3]).min() >= COS
    # /embeddings: OpenAI's shape, model optional (TEI's and infinity's path)
    data = _post(url, "/embeddings", {"input": texts[:3]}).json()
    assert data["model"] == NAME and cosine_rows(np.array([d["embedding"] for d in data["data"]]), ref[:3]).min() >= COS
    sims = _post(url, "/similarity", {"inputs": {"source_sentence": texts[0], "sentences": texts[1:4]}}).json()
    want = st.similarity(ref[:1], ref[1:4])[0].numpy()
    assert np.abs(np.array(sims) - want).max() <= 1e-4


def test_cohere_sdk_v1_and_v2_embed_by_type(url, texts, st, minilm_repo):
    import cohere
    from sentence_transformers.util.quantization import quantize_embeddings

    ref = st.encode(texts)
    calibration = np.load(minilm_repo / NAME / "1" / "embtrt_calibration.npy")
    v1 = cohere.Client(api_key="unused", base_url=url)
    floats = v1.embed(texts=texts, model=NAME, input_type="search_document")
    assert floats.response_type == "embeddings_floats" and floats.texts == texts
    assert cosine_rows(np.array(floats.embeddings, np.float32), ref).min() >= COS
    assert floats.meta.billed_units.input_tokens > len(texts)
    v2 = cohere.ClientV2(api_key="unused", base_url=url)
    kinds = ["float", "int8", "uint8", "binary", "ubinary"]
    by = v2.embed(texts=texts, model=NAME, input_type="search_query", embedding_types=kinds).embeddings
    served = np.array(by.float_, np.float32)
    assert cosine_rows(served, ref).min() >= COS
    for t in kinds[1:]:   # each type from the same float vectors, as quantize_embeddings makes it
        got = np.array(getattr(by, t))
        want = quantize_embeddings(served, precision=t, calibration_embeddings=calibration if "int8" in t else None)
        assert np.array_equal(got, want.astype(int)), t
    narrow = v2.embed(texts=texts[:3], model=NAME, input_type="clustering", embedding_types=["float"],
                      output_dimension=128).embeddings.float_
    assert cosine_rows(np.array(narrow), st.encode(texts[:3], truncate_dim=128, normalize_embeddings=True)).min() >= COS
    with pytest.raises(cohere.BadRequestError) as e:
        v2.embed(texts=texts[:1], model=NAME, input_type="search_query", embedding_types=["float16"])
    assert "embedding_types must be" in e.value.body["message"] and set(e.value.body) == {"message"}
    assert len(v1.embed(texts=texts[:2], model=NAME).embeddings) == 2   # and it serves on


def test_each_anchor_route_answers_bad_input_in_its_own_shape_and_serving_goes_on(url, texts):
    _tei(_post(url, "/embed", {"inputs": []}), 400, "Empty", "inputs must be a non-empty list")
    _tei(_post(url, "/embed", {"inputs": "a", "dimensions": 0}), 422, "Validation", "invalid dimensions 0")
    _tei(_post(url, "/embed", {"inputs": ["a"] * 65}), 422, "Validation", "batch size 65 > maximum allowed batch size 64")
    _tei(_post(url, "/embed", {"inputs": "a", "truncation_direction": "up"}), 422, "Validation", "truncation_direction")
    _tei(httpx.post(url + "/embed", content=b"{nope", timeout=30), 422, "Validation", "not valid JSON")
    _tei(_post(url, "/similarity", {"inputs": {"source_sentence": "a", "sentences": []}}), 400, "Empty",
         "inputs.sentences")
    _tei(_post(url, "/", {"inputs": {"source_sentence": 3, "sentences": ["a"]}}), 422, "Validation",
         "inputs.source_sentence must be a string")
    _tei(_post(url, "/rerank", {"query": "q", "texts": ["a"]}), 424, "Backend", "this gateway serves no reranker")
    r = _post(url, "/v1/embed", {"texts": "a"})
    assert r.status_code == 400 and r.json() == {"message": "texts must be a list of strings"}
    r = _post(url, "/v1/embed", {"texts": ["a"], "input_type": ["search_query"]})
    assert r.status_code == 400 and "input_type must be one of" in r.json()["message"]
    assert _post(url, "/v1/embed", {"texts": ["a"], "truncate": None}).status_code == 200   # null: Cohere's default
    assert _post(url, "/v2/embed", {"texts": [], "input_type": "search_query"}).status_code == 400
    err = _envelope(_post(url, "/embeddings", {"input": []}), 400, "input must be a string")   # OpenAI's shape
    assert err["param"] == "input"
    vllm = _post(url, "/tokenize", {"prompt": 5})
    assert vllm.status_code == 400 and vllm.json()["error"]["type"] == "BadRequestError"
    assert vllm.json()["error"]["code"] == 400 and "prompt must be a string" in vllm.json()["error"]["message"]
    assert np.array(_post(url, "/embed", {"inputs": texts[:2]}).json()).shape == (2, 384)


def test_tokenize_and_decode_equal_the_models_tokenizer(url, texts, minilm_repo):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(minilm_repo / NAME / "1" / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    text = "Naïve café — 東京 tokens"
    got = _post(url, "/tokenize", {"inputs": [text, texts[0]]}).json()
    enc = tok.encode(text)
    assert [t["id"] for t in got[0]] == enc.ids and len(got) == 2
    assert [t["special"] for t in got[0]] == [bool(s) for s in enc.special_tokens_mask]
    raw = text.encode("utf-8")
    for t in got[0]:
        if not t["special"]:   # byte offsets into the text, and their text
            assert raw[t["start"]:t["stop"]].decode() == t["text"]
    assert got[0][0] == {"id": enc.ids[0], "text": "[CLS]", "special": True, "start": None, "stop": None}
    plain = _post(url, "/tokenize", {"inputs": text, "add_special_tokens": False}).json()[0]
    assert [t["id"] for t in plain] == tok.encode(text, add_special_tokens=False).ids
    assert _post(url, "/decode", {"ids": enc.ids}).json() == [tok.decode(enc.ids)]
    assert _post(url, "/decode", {"ids": [enc.ids], "skip_special_tokens": False}).json() == [
        tok.decode(enc.ids, skip_special_tokens=False)]
    v = _post(url, "/tokenize", {"model": NAME, "prompt": text, "return_token_strs": True}).json()
    assert v == {"count": len(enc.ids), "max_model_len": 256, "tokens": enc.ids, "token_strs": enc.tokens}
    assert _post(url, "/detokenize", {"tokens": enc.ids}).json() == {"prompt": tok.decode(enc.ids, skip_special_tokens=False)}
    _tei(_post(url, "/decode", {"ids": [10 ** 9]}), 422, "Validation", "outside the vocabulary")
    # a bad prompt name is TEI's 422 (a prompt by name: test_gateway_sparse, whose model has a non-empty one)
    for bad in ("nope", ["query"]):
        _tei(_post(url, "/tokenize", {"inputs": text, "prompt_name": bad}), 422, "Validation", "unknown prompt_name")
    assert "x-compute-time" not in _post(url, "/tokenize", {"inputs": text}).headers   # TEI sends none there


def test_info_and_nim_health_and_metadata(url):
    info = httpx.get(url + "/info").json()
    assert info["model_id"] == NAME and info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert (info["max_client_batch_size"], info["max_input_length"], info["auto_truncate"]) == (64, 256, True)
    assert httpx.get(url + "/v1/health/ready").json() == {"object": "health.response", "message": "ready", "ready": True}
    assert httpx.get(url + "/v1/health/live").status_code == 200
    meta = httpx.get(url + "/v1/metadata").json()
    assert [m["shortName"] for m in meta["modelInfo"]] == [NAME] and meta["version"]
    assert "embtrt_gateway_requests" in httpx.get(url + "/v1/metrics").text
    routes = json.dumps(httpx.get(url + "/nope").json())
    for path in ("POST /embed", "POST /v2/embed", "POST /tokenize", "GET /info", "GET /v1/health/ready"):
        assert path in routes


@pytest.fixture(scope="module")
def tiny_url(tiny_repos, tmp_path_factory):
    """A gateway in front of the tiny XLM-R embedder built with --pooler python (its encoders return token embeddings)."""
    from conftest import start_server

    tmp = tmp_path_factory.mktemp("gw-embed-all")
    with start_server(tiny_repos["xlmr-mean"], tmp) as srv:
        with gateway(tiny_repos["xlmr-mean"], tmp / "gw.log", "--triton", srv.grpc_url) as u:
            yield u


def test_embed_all_gives_sentence_transformers_token_embeddings(tiny_url, tiny_models, url, corpus):
    from sentence_transformers import SentenceTransformer

    texts = corpus[:5] + [" ".join(corpus[:8])]   # the last one cut at the max length, as encode cuts it
    st = SentenceTransformer(str(tiny_models["xlmr-mean"]), device="cpu")
    want = st.encode(texts, output_value="token_embeddings")
    r = _post(tiny_url, "/embed_all", {"inputs": texts})
    assert r.status_code == 200, r.text
    got = r.json()
    assert [len(g) for g in got] == [len(w) for w in want] and len(got[-1]) == st.max_seq_length
    for g, w in zip(got, want, strict=True):
        g = np.array(g, np.float32)
        assert np.abs(g - w.numpy()).max() <= 1e-4 and cosine_rows(g, w.numpy()).min() >= COS
    assert int(r.headers["x-compute-tokens"]) == sum(len(w) for w in want)
    # the default (fused) build pools inside its graph: TEI's 424, naming the rebuild
    _tei(_post(url, "/embed_all", {"inputs": "a"}), 424, "Backend", "rebuild it with --pooler python")
