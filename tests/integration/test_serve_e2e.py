"""End to end: a real tritonserver on 127.0.0.1, tritonclient gRPC, vectors equal to the reference."""

import asyncio
import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import start_server
from embtrt.serve.client import AsyncEmbeddingClient, EmbeddingClient
from embtrt.errors import ClientError
from embtrt.reference.parity import cosine_rows
from embtrt.reference.torch_ref import TorchReference, st_embed
from parity_helpers import assert_apart, assert_discriminating, assert_rows_equal

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def st_reference(minilm_path, corpus):
    return st_embed(minilm_path, corpus)


@pytest.fixture(scope="module")
def tiny_server(tiny_repos, tmp_path_factory):
    """One tritonserver serving the three tiny repositories (models bert_cls, xlmr_mean, qwen3_last)."""
    first, *more = tiny_repos.values()
    with start_server(first, tmp_path_factory.mktemp("tiny_srv"), *more) as srv:
        yield srv


@pytest.fixture(scope="module")
def token_counts(minilm_path, corpus):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(minilm_path / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return np.array([len(e.ids) for e in tok.encode_batch(corpus)])


def _gate(ref, got, what=""):
    """fp32 paths: every row equals its own reference row, in order (min, not only p50 / p01)."""
    return assert_rows_equal(ref, got, what=what)


def test_front_door_equals_sentence_transformers_on_every_bucket(minilm_server, corpus, st_reference, token_counts):
    assert len(corpus) >= 300
    for lo, hi in ((0, 32), (33, 128), (129, 256), (257, 10**9)):  # every bucket and over-long texts
        assert ((token_counts >= lo) & (token_counts <= hi)).sum() >= 20
    with EmbeddingClient(minilm_server.grpc_url, "all_minilm_l6_v2") as c:
        got = c.embed(corpus)
        ident = c.metadata().identity
    assert got.shape == (len(corpus), 384) and got.dtype == np.float32
    _gate(st_reference, got, "front door")
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert ident["embtrt.pooling"] == "mean" and ident["embtrt.target"] == "python-ort"


def test_each_bucket_ensemble_equals_sentence_transformers(minilm_server, corpus, st_reference, token_counts):
    edges = (32, 128, 256)
    for i, L in enumerate(edges):
        lo = edges[i - 1] if i else 0
        rows = np.nonzero((token_counts > lo) & ((token_counts <= L) | (L == edges[-1])))[0]
        with EmbeddingClient(minilm_server.grpc_url, f"all_minilm_l6_v2_{L}") as c:
            got = c.embed([corpus[r] for r in rows])
        _gate(st_reference[rows], got, f"bucket ensemble {L}")


def test_bucket_ensemble_rejects_a_text_longer_than_its_bucket(minilm_server):
    with EmbeddingClient(minilm_server.grpc_url, "all_minilm_l6_v2_32") as c:
        with pytest.raises(ClientError, match="do not fit this 32-token bucket"):
            c.embed(["word " * 60])
        assert c.embed(["still serving"]).shape == (1, 384)


def test_a_request_mixing_short_and_long_texts_returns_each_vector_in_its_row(minilm_server, corpus, st_reference,
                                                                             token_counts):
    short = np.nonzero(token_counts <= 32)[0][:6]
    mid = np.nonzero((token_counts > 32) & (token_counts <= 128))[0][:6]
    long_ = np.nonzero(token_counts > 256)[0][:6]
    rows = np.array([x for trio in zip(long_, short, mid, strict=True) for x in trio])  # interleaved across buckets
    with EmbeddingClient(minilm_server.grpc_url, "all_minilm_l6_v2", batch_size=32) as c:
        got = c.embed([corpus[r] for r in rows])
    cos = cosine_rows(st_reference[rows], got)
    assert cos.min() >= 0.9999
    # each row matches its own reference far better than any other row's
    sims = got @ st_reference[rows].T
    assert np.array_equal(np.argmax(sims, axis=1), np.arange(len(rows)))


def test_async_client_embeds_concurrently_in_order(minilm_server, corpus, st_reference):
    async def run():
        async with AsyncEmbeddingClient(minilm_server.grpc_url, "all_minilm_l6_v2", batch_size=7) as c:
            ident = await c.identity()
            return ident, await c.embed(corpus[:60])

    ident, got = asyncio.run(run())
    assert ident["embtrt.dim"] == "384"
    assert cosine_rows(st_reference[:60], got).min() >= 0.9999


def test_cli_embed_prints_vectors_as_json(minilm_server, st_reference, corpus):
    proc = subprocess.run([sys.executable, "-m", "embtrt.cli", "embed", corpus[0], corpus[1], "--url",
                           minilm_server.grpc_url, "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    got = np.array(doc["embeddings"], dtype=np.float32)
    assert cosine_rows(st_reference[:2], got).min() >= 0.9999
    assert doc["latency_ms"] > 0 and doc["identity"]["embtrt.normalize"] == "true"


def test_cli_embed_unknown_model_fails_with_a_hint(minilm_server):
    proc = subprocess.run([sys.executable, "-m", "embtrt.cli", "embed", "x", "--url", minilm_server.grpc_url,
                           "--model", "nope"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 7
    assert "nope" in proc.stderr and "hint" in proc.stderr


@pytest.mark.parametrize("key", ["bert-cls", "xlmr-mean", "qwen3-last"])
def test_tiny_models_served_equal_pytorch(key, tiny_models, tiny_server, corpus, tmp_path):
    from embtrt.export.spec_options import spec_from_options

    spec = spec_from_options(tiny_models[key], tmp_path / "unused")
    ref = TorchReference(spec.model_dir, spec.pooling, spec.normalize, spec.max_seq_length,
                         spec.input_names).embed(corpus)
    assert_apart(ref, key)   # the model tells texts apart, so the parity below can fail
    if (tiny_models[key] / "modules.json").exists():
        assert_discriminating(tiny_models[key], corpus[:64])
        assert_rows_equal(st_embed(tiny_models[key], corpus), ref, what=f"{key}: PyTorch reference vs encode")
    name, srv = key.replace("-", "_"), tiny_server
    with EmbeddingClient(srv.grpc_url, name) as c:
        got = c.embed(corpus)
    _gate(ref, got, name)
    # and through the largest bucket's ensemble (tokenizer -> encoder [-> python pooler])
    with EmbeddingClient(srv.grpc_url, f"{name}_{spec.buckets[-1]}") as c:
        _gate(ref[:50], c.embed(corpus[:50]), f"{name}_{spec.buckets[-1]}")


def test_cli_embed_takes_each_request_option(minilm_server, minilm_path, corpus, token_counts):
    """`embtrt embed`'s option flags reach the server: each equals SentenceTransformer.encode with
    the same option (truncation side, width, a compact type)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util.quantization import quantize_embeddings

    long = [corpus[i] for i in np.nonzero(token_counts > 300)[0][:2]]
    assert len(long) == 2
    texts = [corpus[0], *long]

    def embed(*flags):
        p = subprocess.run([sys.executable, "-m", "embtrt.cli", "embed", *texts, "--url", minilm_server.grpc_url,
                            "--json", *flags], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return np.array(json.loads(p.stdout)["embeddings"])

    m = SentenceTransformer(str(minilm_path), device="cpu")
    end = m.encode(texts, convert_to_numpy=True)
    got = embed("--dimensions", "64")
    assert got.shape == (3, 64)
    assert_rows_equal(st_embed(minilm_path, texts, truncate_dim=64, normalize_embeddings=True), got, what="--dimensions")
    m.tokenizer.truncation_side = "left"
    start = m.encode(texts, convert_to_numpy=True)
    assert cosine_rows(end[1:], start[1:]).max() < 0.99       # the two sides differ on these texts
    assert_rows_equal(start, embed("--truncate", "START"), what="--truncate START")
    assert_rows_equal(end, embed("--truncate", "END"), what="--truncate END")
    packed = embed("--embedding-type", "ubinary")
    assert packed.shape == (3, 384 // 8)
    want = quantize_embeddings(end, precision="ubinary")
    flipped = np.unpackbits(packed.astype(np.uint8) ^ want, axis=1).astype(bool)
    assert np.all(np.abs(end[flipped]) < 1e-5)   # a bit can differ only where the value is ~0
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "embed", long[0], "--url", minilm_server.grpc_url,
                        "--truncate", "NONE"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "longer than the max sequence length 256 tokens" in p.stderr, p.stderr[-2000:]


def test_demo_serves_the_repository_and_prints_vectors_equal_to_encode(minilm_repo, minilm_path):
    """`embtrt demo` (the README's main job) on an existing repository: serves it on free ports,
    prints each text's vector, stops the server."""
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "demo", "--out", str(minilm_repo)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    out = p.stdout + p.stderr
    assert f"reusing the repository in {minilm_repo}" in " ".join(out.split()), out[:1000]   # #73: it says so
    rows = [line for line in out.splitlines() if " ms  dim 384  [" in line]
    assert len(rows) == 3, out[-2000:]
    texts = ["Triton serves embeddings with dynamic batching.", "A dog runs in the park.",
             "Embedding services are one forward pass, not a generation loop; route texts by length so long "
             "documents do not slow down short queries."]
    want = st_embed(minilm_path, texts)
    for line, text, ref in zip(rows, texts, want, strict=True):
        assert repr(text[:50]) in line, (line, text)
        head = [float(x) for x in line.split("[", 1)[1].split(", ...]")[0].split(", ")]
        np.testing.assert_allclose(head, ref[:4], atol=2e-4)
    assert "for all 3 texts in one request" in out and out.rstrip().endswith("server stopped")
