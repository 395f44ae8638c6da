"""Per-request options on a real tritonserver, the gRPC client and the gateway (openai client):
prompt_name / input_type, dimensions, truncate, embedding_type. Each equals
SentenceTransformer.encode with the same option.

Models: two tiny sentence-transformers folders with prompts and a default prompt, Qwen3-Embedding
style — an XLM-R (mean pooling, Normalize) whose Pooling config says include_prompt false, and a
BERT (CLS, no Normalize) with include_prompt true — plus the session's all-MiniLM-L6-v2.
"""

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from embtrt.reference.parity import cosine_rows
from embtrt.reference.torch_ref import st_embed
from parity_helpers import assert_discriminating, assert_rows_equal

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NAME = "all_minilm_l6_v2"
QUERY = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
PROMPTS = {"query": QUERY, "passage": "passage: ", "document": ""}


@pytest.fixture(scope="module")
def prompted(tiny_models, tmp_path_factory):
    """{key: (model folder, repository, server)} for the two prompted models."""
    from conftest import start_server
    from tiny_models import with_prompts

    from embtrt.common.corpus import load_corpus
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    base = tmp_path_factory.mktemp("prompted")
    models = {
        "xp": with_prompts(tiny_models["xlmr-mean"], base / "xp", PROMPTS, "query", include_prompt=False),
        "bp": with_prompts(tiny_models["bert-cls"], base / "bp", {"query": "query: ", "passage": "passage: "}, "query"),
    }
    # both tell texts apart, and one text under each prompt (and none) apart: the parity checks
    # below can fail on a dropped prompt or a wrong pooling
    texts = _texts(load_corpus())
    assert_discriminating(models["xp"], texts, prompts=("query", "passage"))
    assert_discriminating(models["bp"], texts, prompts=("query", "passage"))
    out = {}
    servers = []
    try:
        for key, folder in models.items():
            repo = base / f"{key}-repo"
            build(spec_from_options(folder, repo, name=key), log=lambda m: None)
            srv = start_server(repo, base)
            srv.__enter__()
            servers.append(srv)
            out[key] = (folder, repo, srv)
        yield out
    finally:
        for srv in servers:
            srv.__exit__(None, None, None)


def _texts(corpus):
    return corpus[::6][:60]


def test_build_reads_prompts_and_leaves_prompt_tokens_out_of_pooling_outside_the_graph(prompted):
    folder, repo, _ = prompted["xp"]
    man = json.loads((repo / "embtrt.json").read_text())
    assert man["schema_version"] == 3 and man["kind"] == "embedder"   # schema 3: the kind of model
    assert man["prompts"] == PROMPTS and man["default_prompt_name"] == "query" and man["include_prompt"] is False
    assert man["pooler"] == "python"        # include_prompt false needs the hidden states outside the graph
    assert man["parity"]["passed"]
    _, brepo, _ = prompted["bp"]
    bman = json.loads((brepo / "embtrt.json").read_text())
    assert bman["pooler"] == "fused" and bman["include_prompt"] is True and bman["default_prompt_name"] == "query"


def test_build_gate_compares_with_encode_including_the_default_prompt(prompted, corpus):
    """The gate's reference is SentenceTransformer.encode (default prompt applied, prompt tokens out of
    pooling): a served path that ignored the default prompt fails it; the one built passes it."""
    from embtrt.kinds.embedder.export import reference_vectors
    from embtrt.export.served import encoder_vectors
    from embtrt.export.spec_options import spec_from_options
    from embtrt.reference.parity import evaluate

    folder, repo, _ = prompted["xp"]
    man = json.loads((repo / "embtrt.json").read_text())
    spec = spec_from_options(folder, repo, name="xp")
    texts = corpus[:120]
    ref = reference_vectors(spec, texts, log=lambda m: None)
    onnx = {b: repo / f"xp_{b}_encoder" / "1" / "model.onnx" for b in spec.buckets}
    tok = repo / "xp" / "1" / "tokenizer.json"
    good, labels = encoder_vectors(spec, onnx, tok, man["pad_id"], man["encoder_output"], texts)
    assert evaluate(ref, good, labels, spec.gate, texts).passed
    no_prompt = spec.with_(default_prompt_name=None)
    bad, labels = encoder_vectors(no_prompt, onnx, tok, man["pad_id"], man["encoder_output"], texts)
    report = evaluate(ref, bad, labels, spec.gate, texts)
    assert not report.passed and any("cosine" in f for f in report.failures)


@pytest.mark.parametrize("key", ["xp", "bp"])
def test_each_prompt_and_the_default_equal_sentence_transformers_over_grpc(prompted, corpus, key):
    from embtrt.serve.client import EmbeddingClient

    folder, repo, srv = prompted[key]
    texts = _texts(corpus)
    largest = json.loads((repo / "embtrt.json").read_text())["buckets"][-1]
    with EmbeddingClient(srv.grpc_url, key) as c:
        cases = [({}, {}), ({"prompt_name": "query"}, {"prompt_name": "query"}),
                 ({"prompt_name": "passage"}, {"prompt_name": "passage"}),
                 ({"input_type": "passage"}, {"prompt_name": "passage"}), ({"input_type": "query"}, {"prompt_name": "query"})]
        for ours, theirs in cases:
            got = c.embed(texts, **ours)
            assert_rows_equal(st_embed(folder, texts, **theirs), got, what=f"{key} {ours}")
        # the prompts change the vectors far beyond rounding: the option is not a no-op
        assert np.abs(c.embed(texts) - c.embed(texts, prompt_name="passage")).max() > 1e-4  # rounding: ~1e-6
    # the bucket ensembles take no options and apply the default prompt, as encode() does
    with EmbeddingClient(srv.grpc_url, f"{key}_{largest}") as c:
        short = [t for t in texts if len(t) < 200][:20]
        assert_rows_equal(st_embed(folder, short), c.embed(short), what=f"{key}_{largest}")


def test_dimensions_equal_truncate_dim_normalized(minilm_server, minilm_path, corpus, prompted):
    from embtrt.serve.client import EmbeddingClient

    texts = _texts(corpus)
    with EmbeddingClient(minilm_server.grpc_url, NAME) as c:
        for d in (384, 192, 16):
            got = c.embed(texts, dimensions=d)
            ref = st_embed(minilm_path, texts, truncate_dim=d, normalize_embeddings=True)
            assert got.shape == (len(texts), d) and cosine_rows(ref, got).min() >= 0.9999
            assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    folder, _, srv = prompted["xp"]
    with EmbeddingClient(srv.grpc_url, "xp") as c:  # a prompt and a width together
        got = c.embed(texts, prompt_name="passage", dimensions=24)
        ref = st_embed(folder, texts, prompt_name="passage", truncate_dim=24, normalize_embeddings=True)
        assert cosine_rows(ref, got).min() >= 0.9999


def test_truncate_start_end_none(minilm_server, minilm_path, corpus):
    from sentence_transformers import SentenceTransformer

    from embtrt.errors import ClientError
    from embtrt.serve.client import EmbeddingClient

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(minilm_path / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    long = [t for t in corpus if len(tok.encode(t).ids) > 300][:8]
    short = [t for t in corpus if len(tok.encode(t).ids) < 100][:8]
    assert len(long) == 8
    m = SentenceTransformer(str(minilm_path), device="cpu")
    end = m.encode(long, convert_to_numpy=True)
    m.tokenizer.truncation_side = "left"
    start = m.encode(long, convert_to_numpy=True)
    assert cosine_rows(end, start).max() < 0.99  # the two sides differ on these texts
    with EmbeddingClient(minilm_server.grpc_url, NAME) as c:
        assert cosine_rows(end, c.embed(long)).min() >= 0.9999
        assert cosine_rows(end, c.embed(long, truncate="END")).min() >= 0.9999
        assert cosine_rows(start, c.embed(long, truncate="START")).min() >= 0.9999
        assert cosine_rows(m.encode(short), c.embed(short, truncate="NONE")).min() >= 0.9999
        with pytest.raises(ClientError, match="longer than the max sequence length 256 tokens"):
            c.embed([short[0], long[0]], truncate="NONE")


def test_compact_types_equal_quantize_embeddings(minilm_server, minilm_repo, minilm_path, corpus):
    from sentence_transformers.util.quantization import quantize_embeddings

    from embtrt.serve.client import EmbeddingClient

    texts = _texts(corpus)
    ref = st_embed(minilm_path, texts)
    calibration = np.load(minilm_repo / NAME / "1" / "embtrt_calibration.npy")
    man = json.loads((minilm_repo / "embtrt.json").read_text())
    assert np.allclose(man["quant_ranges"], [calibration.min(0), calibration.max(0)])
    with EmbeddingClient(minilm_server.grpc_url, NAME) as c:
        served = c.embed(texts)
        for etype, dtype in (("binary", np.int8), ("ubinary", np.uint8)):
            got = c.embed(texts, embedding_type=etype)
            assert got.dtype == dtype and got.shape == (len(texts), 384 // 8)
            assert np.array_equal(got, quantize_embeddings(served, precision=etype))
            want = quantize_embeddings(ref, precision=etype)
            flipped = np.unpackbits((got.view(np.uint8) ^ want.view(np.uint8)), axis=1).astype(bool)
            assert np.all(np.abs(ref[flipped]) < 1e-5)   # a sign can differ only where the value is ~0
        for etype, dtype in (("int8", np.int8), ("uint8", np.uint8)):
            got = c.embed(texts, embedding_type=etype)
            assert got.dtype == dtype and got.shape == (len(texts), 384)
            assert np.array_equal(got, quantize_embeddings(served, precision=etype, calibration_embeddings=calibration))
            want = quantize_embeddings(ref, precision=etype, calibration_embeddings=calibration)
            assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
            # the ranges do not depend on the other texts of the batch: a text sent alone is quantized
            # with the same stored ranges (its float vector may differ from the batched one by rounding)
            alone = np.concatenate([c.embed([t], embedding_type=etype) for t in texts[:5]])
            alone_f = np.concatenate([c.embed([t]) for t in texts[:5]])
            assert np.array_equal(alone, quantize_embeddings(alone_f, precision=etype, calibration_embeddings=calibration))
            assert np.abs(alone.astype(int) - got[:5].astype(int)).max() <= 1
        # a width and a type together: ranges from the calibration vectors at that width
        got = c.embed(texts, embedding_type="int8", dimensions=64)
        cal64 = calibration[:, :64] / np.linalg.norm(calibration[:, :64], axis=1, keepdims=True)
        served64 = c.embed(texts, dimensions=64)
        assert np.array_equal(got, quantize_embeddings(served64, precision="int8", calibration_embeddings=cal64))


def test_bad_option_values_fail_their_request_while_the_batch_is_served(minilm_server, prompted, corpus):
    from embtrt.errors import ClientError
    from embtrt.serve.client import AsyncEmbeddingClient

    _, _, srv = prompted["xp"]
    bad = [({"prompt_name": "nope"}, "unknown prompt_name 'nope'.*document, passage, query"),
           ({"dimensions": 49}, "invalid dimensions 49.*any width from 1 to 48"),
           ({"dimensions": 0}, "invalid dimensions 0"),
           ({"truncate": "MIDDLE"}, "invalid truncate 'MIDDLE': allowed END, START, NONE"),
           ({"embedding_type": "int4"}, "invalid embedding_type 'int4'"),
           ({"input_type": "classification"}, "invalid input_type"),
           ({"prompt_name": "query", "input_type": "passage"}, "disagree")]

    async def run():
        async with AsyncEmbeddingClient(srv.grpc_url, "xp", retries=0) as c:
            good = [c.embed(corpus[i:i + 2]) for i in range(0, 16, 2)]
            wrong = [c.embed(corpus[:2], **opts) for opts, _ in bad]
            return await asyncio.gather(*good, *wrong, return_exceptions=True)

    res = asyncio.run(run())
    goods, wrongs = res[:8], res[8:]
    assert all(isinstance(g, np.ndarray) and g.shape == (2, 48) for g in goods), goods
    for (opts, pattern), r in zip(bad, wrongs, strict=True):
        assert isinstance(r, ClientError), (opts, r)
        import re

        assert re.search(pattern, str(r)), (opts, str(r))
    # a parameter of the wrong type (dimensions as text) is refused with its name
    import tritonclient.grpc as grpcclient

    from embtrt.serve.client import _text_input

    c = grpcclient.InferenceServerClient(srv.grpc_url)
    with pytest.raises(Exception, match="invalid dimensions: must be an integer"):
        c.infer("xp", [_text_input(["x"])], parameters={"dimensions": "wide"})
    with pytest.raises(Exception, match="invalid prompt_name: must be a string"):
        c.infer("xp", [_text_input(["x"])], parameters={"prompt_name": 3})
    c.close()


@pytest.mark.parametrize("route", ["auto", "frontdoor"])  # auto: one request at a time goes as token ids
def test_gateway_takes_the_options_with_the_openai_client(route, prompted, corpus, tmp_path):
    from openai import BadRequestError, NotFoundError, OpenAI
    from sentence_transformers.util.quantization import quantize_embeddings
    from test_gateway import _envelope, _post, gateway
    from tokenizers import Tokenizer

    folder, repo, srv = prompted["xp"]
    texts = _texts(corpus)[:24]
    with gateway(repo, tmp_path / "gw.log", "--triton", srv.grpc_url, "--route", route, "--token-ids") as url:
        c = OpenAI(base_url=url + "/v1", api_key="unused")
        models = c.models.list().data
        assert models[0].id == "xp" and models[0].model_extra["prompts"] == PROMPTS
        assert "xp-query" in models[0].model_extra["aliases"]
        for extra, model, theirs in (({}, "xp", {}), ({"input_type": "passage"}, "xp", {"prompt_name": "passage"}),
                                     ({}, "xp-passage", {"prompt_name": "passage"}), ({}, "xp-query", {"prompt_name": "query"}),
                                     ({"prompt_name": "document"}, "xp", {"prompt_name": "document"})):
            r = c.embeddings.create(model=model, input=texts, encoding_format="float", extra_body=extra)
            got = np.asarray([d.embedding for d in r.data], dtype=np.float32)
            assert_rows_equal(st_embed(folder, texts, **theirs), got, what=f"{model} {extra}")
        # usage counts the prompt's tokens: they are embedded
        tok = Tokenizer.from_file(str(repo / "xp" / "1" / "tokenizer.json"))
        tok.enable_truncation(max_length=128)
        r = c.embeddings.create(model="xp", input=texts, extra_body={"input_type": "query"})
        assert r.usage.prompt_tokens == sum(len(e.ids) for e in tok.encode_batch([QUERY + t for t in texts]))
        # dimensions (the openai client's own field), and base64 (the client's default) of a shorter width
        r = c.embeddings.create(model="xp", input=texts, dimensions=16)
        got = np.asarray([d.embedding for d in r.data], dtype=np.float32)
        ref = st_embed(folder, texts, truncate_dim=16, normalize_embeddings=True)
        assert got.shape == (len(texts), 16) and cosine_rows(ref, got).min() >= 0.9999
        # compact types: integers as a list, or the raw bytes in base64
        f = np.asarray([d.embedding for d in c.embeddings.create(model="xp", input=texts, encoding_format="float").data],
                       dtype=np.float32)
        for etype, dtype in (("binary", np.int8), ("ubinary", np.uint8)):
            want = quantize_embeddings(f, precision=etype)
            r = c.embeddings.create(model="xp", input=texts, encoding_format="float", extra_body={"embedding_type": etype})
            assert np.array_equal(np.asarray([d.embedding for d in r.data]), want.astype(int))
            raw = _post(url, {"model": "xp", "input": texts, "encoding_format": "base64", "embedding_type": etype})
            assert raw.status_code == 200, raw.text
            items = raw.json()["data"]
            got = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype=dtype) for d in items])
            assert np.array_equal(got, want)
        cal = np.load(repo / "xp" / "1" / "embtrt_calibration.npy")
        r = c.embeddings.create(model="xp", input=texts, encoding_format="float", extra_body={"embedding_type": "int8"})
        assert np.array_equal(np.asarray([d.embedding for d in r.data]),
                              quantize_embeddings(f, precision="int8", calibration_embeddings=cal).astype(int))
        # bad values: 400 in OpenAI's envelope, naming the parameter
        for extra, param in (({"prompt_name": "nope"}, "prompt_name"), ({"dimensions": 4096}, "dimensions"),
                             ({"truncate": "SIDEWAYS"}, "truncate"), ({"embedding_type": "fp4"}, "embedding_type"),
                             ({"input_type": "classify"}, "input_type"), ({"dimensions": "8"}, "dimensions")):
            with pytest.raises(BadRequestError):
                c.embeddings.create(model="xp", input=texts[:2], extra_body=extra)
            err = _envelope(_post(url, {"model": "xp", "input": texts[:2], **extra}), 400, "")
            assert err["param"] == param and err["type"] == "invalid_request_error", (extra, err)
        with pytest.raises(NotFoundError):
            c.embeddings.create(model="xp-classification", input="x")
        # token ids are embedded as given: an explicit prompt cannot apply to them
        err = _envelope(_post(url, {"model": "xp", "input": [[0, 5, 6, 2]], "input_type": "passage"}), 400, "token-id input")
        assert err["param"] == "input"


@pytest.mark.slow  # verify itself in the default run: test_verify.py; options on every surface: the tests above
def test_verify_gates_a_served_model_with_options(prompted, tiny_models):
    folder, _, srv = prompted["xp"]
    for args in (["--prompt-name", "passage", "--dimensions", "24"], ["--prompt-name", "query"]):
        p = subprocess.run([sys.executable, "-m", "embtrt.cli", "verify", "--url", srv.grpc_url, "--model", "xp",
                            "--reference", str(folder), "--json", *args], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        assert json.loads(p.stdout)["passed"]
    # the gate has teeth: against the same weights without the prompts, the served query prompt fails it
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "verify", "--url", srv.grpc_url, "--model", "xp",
                        "--reference", str(tiny_models["xlmr-mean"])], capture_output=True, text=True)
    assert p.returncode == 4 and "FAILED" in p.stdout, p.stdout[-2000:]


def test_one_gateway_serves_several_models_each_equal_to_its_reference(prompted, minilm_repo, minilm_server,
                                                                      minilm_path, corpus, tmp_path):
    """Three repositories behind one gateway (the session's MiniLM and the two prompted models, each on
    its own tritonserver): `model` picks one, each model's vectors equal its own sentence-transformers
    reference, /v1/models lists every model with its identity, unknown names are 404, metrics per model."""
    import httpx
    from openai import NotFoundError, OpenAI
    from test_gateway import _metric, gateway

    xfolder, xrepo, xsrv = prompted["xp"]
    bfolder, brepo, bsrv = prompted["bp"]
    pools = []
    for name, repo, srv in (("xp", xrepo, xsrv), ("bp", brepo, bsrv)):
        pools += [a for b in json.loads((repo / "embtrt.json").read_text())["buckets"]
                  for a in ("--pool", f"{name}:{b}={srv.grpc_url}")]
    texts = _texts(corpus)[:20]
    with gateway(minilm_repo, tmp_path / "gw.log", str(xrepo), str(brepo), "--triton", minilm_server.grpc_url,
                 *pools) as url:
        c = OpenAI(base_url=url + "/v1", api_key="unused")
        listed = {m.id: m.model_extra for m in c.models.list().data}
        assert set(listed) == {NAME, "xp", "bp"}
        for name, repo in ((NAME, minilm_repo), ("xp", xrepo), ("bp", brepo)):
            ident = json.loads((repo / "embtrt.json").read_text())["identity"]
            assert listed[name]["embtrt"] == ident
            assert {"embtrt.model_sha256", "embtrt.precision", "embtrt.backend_profile", "embtrt.dim"} <= set(ident)
        for model, folder, theirs in ((NAME, minilm_path, {}), ("xp", xfolder, {}), ("bp", bfolder, {}),
                                      ("xp-passage", xfolder, {"prompt_name": "passage"})):
            r = c.embeddings.create(model=model, input=texts, encoding_format="float")
            got = np.asarray([d.embedding for d in r.data], dtype=np.float32)
            assert r.model == model
            assert_rows_equal(st_embed(folder, texts, **theirs), got, what=model)
        with pytest.raises(NotFoundError):
            c.embeddings.create(model="nope", input="x")
        err = httpx.post(url + "/v1/embeddings", json={"model": "nope", "input": "x"}).json()["error"]
        assert "'xp'" in err["message"] and "'bp'" in err["message"] and err["code"] == "model_not_found"
        assert _metric(url, 'embtrt_gateway_model_requests_total{model="xp",status="200"}') == 2
        assert _metric(url, 'embtrt_gateway_model_requests_total{model="bp",status="200"}') == 1
        ready = httpx.get(url + "/health/ready").json()
        assert ready["status"] == "ready" and {k.split("/")[0] for k in ready["pools"]} == {NAME, "xp", "bp"}


def test_cli_embed_takes_the_prompt_and_input_type_flags(prompted, corpus):
    """`embtrt embed --prompt-name / --input-type / --dimensions` equal encode with the same options."""
    folder, _, srv = prompted["bp"]
    texts = _texts(corpus)[:10]

    def embed(*flags):
        p = subprocess.run([sys.executable, "-m", "embtrt.cli", "embed", *texts, "--url", srv.grpc_url, "--model", "bp",
                            "--json", *flags], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        return np.array(json.loads(p.stdout)["embeddings"], dtype=np.float32)

    assert_rows_equal(st_embed(folder, texts, prompt_name="passage"), embed("--prompt-name", "passage"), what="--prompt-name")
    assert_rows_equal(st_embed(folder, texts, prompt_name="query"), embed("--input-type", "query"), what="--input-type")
    assert_rows_equal(st_embed(folder, texts, prompt_name="passage", truncate_dim=8),
                      embed("--input-type", "passage", "--dimensions", "8"), what="--dimensions")
    assert_rows_equal(st_embed(folder, texts), embed(), what="default prompt")
