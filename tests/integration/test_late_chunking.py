"""#71 item 2: late chunking through the gateway (builder/embtrt/scale/gateway/ops/late.py). The reference:
sentence-transformers' token embeddings of the whole document (`encode(output_value="token_embeddings")`) with
each chunk's tokens (its last character's chunk, special tokens none, from the tokenizer's own offsets,
computed here apart from the gateway's code) mean-pooled and normalized as the model does. A real tritonserver
serving the tiny XLM-R embedder built with --pooler python (mean pooling, normalized), the gateway in front, the
openai client with extra_body and TEI's /embed with explicit spans; refusals with their reasons. The documents
of 1K-16K tokens are tests/integration/test_16k.py's."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from test_gateway import NAME, gateway

pytestmark = pytest.mark.integration
MODEL = "xlmr_mean"
CHUNKS = ["The cat sat on the mat all afternoon.", "It watched the birds outside the window.",
          "Then it slept, dreaming of fish.", "In the evening its owner came home and fed it."]


def reference(folder, document: str, spans: list[tuple[int, int]]) -> tuple[np.ndarray, int]:
    """Each span's mean token embedding of one pass over the document (sentence-transformers), normalized."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    st = SentenceTransformer(str(folder), device="cpu")
    tokens = st.encode(document, output_value="token_embeddings").numpy()
    enc = AutoTokenizer.from_pretrained(str(folder))(document, return_offsets_mapping=True, return_special_tokens_mask=True,
                                                     truncation=False)
    assert len(enc["input_ids"]) == len(tokens) <= st.max_seq_length   # the whole document in the pass
    out = []
    for a, b in spans:
        mine = [k for k, ((s, e), sp) in enumerate(zip(enc["offset_mapping"], enc["special_tokens_mask"], strict=True))
                if not sp and e > s and a <= e - 1 < b]
        assert mine, (a, b)
        v = tokens[mine].mean(axis=0)
        out.append(v / np.linalg.norm(v))
    return np.stack(out), len(tokens)


def _spans(chunks: list[str]) -> tuple[str, list[tuple[int, int]]]:
    doc, at, spans = " ".join(chunks), 0, []
    for c in chunks:
        spans.append((at, at + len(c)))
        at += len(c) + 1
    return doc, spans


@pytest.fixture(scope="module")
def served(tiny_repos, tmp_path_factory):
    """(the gateway's URL, tritonserver's gRPC address)."""
    from conftest import start_server

    tmp = tmp_path_factory.mktemp("late")
    with start_server(tiny_repos["xlmr-mean"], tmp) as srv:
        with gateway(tiny_repos["xlmr-mean"], tmp / "gw.log", "--triton", srv.grpc_url) as u:
            yield u, srv.grpc_url


@pytest.fixture(scope="module")
def url(served):
    return served[0]


def test_openai_late_chunking_equals_span_pooling_of_one_pass_and_differs_from_chunks_alone(url, tiny_models):
    from openai import OpenAI

    client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    got = client.embeddings.create(model=MODEL, input=CHUNKS, extra_body={"late_chunking": True})
    vecs = np.array([d.embedding for d in got.data], np.float32)
    doc, spans = _spans(CHUNKS)
    want, tokens = reference(tiny_models["xlmr-mean"], doc, spans)
    assert vecs.shape == want.shape and np.abs(vecs - want).max() <= 1e-4, np.abs(vecs - want).max()
    assert got.usage.prompt_tokens == tokens
    # the chunks embedded alone are other vectors (each saw only itself): the option did something
    alone = np.array([d.embedding for d in client.embeddings.create(model=MODEL, input=CHUNKS).data], np.float32)
    assert np.abs(alone - want).max() > 1e-2
    # chunks told apart: each vector is nearest its own reference
    assert (np.argmax(vecs @ want.T, axis=1) == np.arange(len(CHUNKS))).all()
    # dimensions combine as for any vector: the first 16 components, normalized again
    short = client.embeddings.create(model=MODEL, input=CHUNKS, dimensions=16, extra_body={"late_chunking": True})
    cut = want[:, :16] / np.linalg.norm(want[:, :16], axis=1, keepdims=True)
    assert np.abs(np.array([d.embedding for d in short.data]) - cut).max() <= 1e-4


def test_tei_explicit_spans_cut_one_document_and_text_outside_them_belongs_to_no_chunk(url, tiny_models):
    doc = " ".join(CHUNKS)
    spans = [(0, 19), (24, 60), (70, len(doc))]   # gaps between: context that no chunk owns
    r = httpx.post(f"{url}/embed", json={"inputs": doc, "chunk_spans": [list(s) for s in spans]}, timeout=60)
    assert r.status_code == 200, r.text
    want, tokens = reference(tiny_models["xlmr-mean"], doc, spans)
    assert np.abs(np.array(r.json(), np.float32) - want).max() <= 1e-4
    assert int(r.headers["x-compute-tokens"]) == tokens


def grpc_embed(address: str, chunks: list[str], parameters: dict, model: str = MODEL, timeout_s: float = 60):
    import tritonclient.grpc as grpcclient

    from embtrt.serve import wire

    with grpcclient.InferenceServerClient(address) as c:
        r = c.infer(model, [wire.text_input(chunks)], parameters=parameters, outputs=wire.outputs("EMBEDDING", "TOKENS"),
                    client_timeout=timeout_s)
    return r.as_numpy("EMBEDDING"), r.as_numpy("TOKENS")


def test_over_grpc_the_front_door_late_chunks_its_text_rows_beside_plain_requests(served, tiny_models):
    """The front door's request parameter late_chunking (embtrt_backend.late_chunks): the TEXT rows are the chunks;
    the same vectors as the reference, TOKENS per chunk adding up to the document's; plain requests sent at the
    same time (the dynamic batch may mix them) keep their own vectors; a bad value or a prompt is INVALID_ARGUMENT."""
    from concurrent.futures import ThreadPoolExecutor

    from tritonclient.utils import InferenceServerException

    doc, spans = _spans(CHUNKS)
    want, tokens = reference(tiny_models["xlmr-mean"], doc, spans)
    plain, _ = grpc_embed(served[1], CHUNKS, {})
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(grpc_embed, served[1], CHUNKS, {"late_chunking": True} if i % 2 == 0 else {}) for i in range(16)]
        got = [f.result() for f in futures]
    for i, (vecs, toks) in enumerate(got):
        if i % 2 == 0:
            assert np.abs(vecs - want).max() <= 1e-4 and int(toks.sum()) == tokens and toks.shape == (len(CHUNKS), 1)
        else:
            assert np.abs(vecs - plain).max() <= 1e-5
    assert np.abs(plain - want).max() > 1e-2
    for params, said in (({"late_chunking": "yes"}, "must be a boolean"), ({"late_chunking": True, "prompt_name": "query"},
                                                                           "a prompt would be context")):
        with pytest.raises(InferenceServerException, match=said) as e:
            grpc_embed(served[1], CHUNKS, params)
        assert "INVALID_ARGUMENT" in str(e.value.status())


@pytest.mark.parametrize(("body", "status", "said"), [
    ({"input": CHUNKS, "late_chunking": "yes"}, 400, "late_chunking must be true or false"),
    ({"input": [[5, 6, 7]], "late_chunking": True}, 400, "send texts, not token ids"),
    ({"input": CHUNKS, "late_chunking": True, "prompt_name": "query"}, 400, "a prompt (prompt_name / input_type)"),
    ({"input": [CHUNKS[0], "   ", CHUNKS[1]], "late_chunking": True}, 400, "input[1]: the chunk holds no token"),
    ({"input": CHUNKS * 8, "late_chunking": True}, 400, "do not fit"),
    ({"input": CHUNKS, "chunk_spans": [[0, 5]]}, 400, "chunk_spans, input is the one document"),
    ({"input": "abcdef", "chunk_spans": [[0, 4], [2, 6]]}, 400, "spans go in order and do not overlap"),
    ({"input": "abcdef", "chunk_spans": [[0, 40]]}, 400, "is not a non-empty span"),
    ({"input": "abcdef", "chunk_spans": [[0, 3]], "late_chunking": False}, 400, "late_chunking false turns off"),
])
def test_what_cannot_be_late_chunked_is_a_400_saying_why(url, body, status, said):
    r = httpx.post(f"{url}/v1/embeddings", json={"model": MODEL, **body}, timeout=60)
    assert r.status_code == status and said in r.json()["error"]["message"], r.text
    # serving goes on
    ok = httpx.post(f"{url}/v1/embeddings", json={"model": MODEL, "input": CHUNKS[:1], "late_chunking": True}, timeout=60)
    assert ok.status_code == 200, ok.text


def test_a_fused_build_and_a_cls_model_are_refused_naming_why(minilm_repo, minilm_server, tiny_repos, tmp_path):
    """MiniLM's default build pools inside its graph: the rebuild is named. A CLS-pooling model's vector is one
    position's: refused naming its pooling (before any call to a server)."""
    import asyncio

    from embtrt.kinds.embedder.scale import Embedder
    from embtrt.scale.gateway.config import GatewayConfig
    from embtrt.scale.gateway.errors import ApiError

    with gateway(minilm_repo, tmp_path / "gw.log", "--triton", minilm_server.grpc_url) as u:
        r = httpx.post(f"{u}/v1/embeddings", json={"model": NAME, "input": CHUNKS, "late_chunking": True}, timeout=60)
    assert r.status_code == 400 and "rebuild it with --pooler python" in r.json()["error"]["message"], r.text
    g = Embedder(GatewayConfig(tiny_repos["bert-cls"], triton="127.0.0.1:1"))
    with pytest.raises(ApiError, match="pools by cls"):
        asyncio.run(g.late_chunks("a b", [(0, 1), (2, 3)], g.served.options.default))


@pytest.mark.parametrize(("path", "body"), [
    ("/v2/embed", {"model": MODEL, "texts": CHUNKS, "input_type": "search_document", "late_chunking": True}),
    ("/similarity", {"inputs": {"source_sentence": CHUNKS[0], "sentences": CHUNKS[1:]}, "chunk_spans": [[0, 3]]}),
])
def test_routes_without_late_chunking_refuse_it_rather_than_ignore_it(url, path, body):
    r = httpx.post(f"{url}{path}", json=body, timeout=60)
    assert r.status_code == (422 if path == "/similarity" else 400) and "late chunking is served on" in r.text, r.text   # TEI: 422
