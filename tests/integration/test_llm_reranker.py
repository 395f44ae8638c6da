"""#71: LLM-style rerankers (Qwen3-Reranker) served on a real tritonserver, in both of their forms: the original
causal LM (detected by its *ForCausalLM architecture and "yes" / "no" tokens; exported as one score row, the last
token's lm_head["yes"] - lm_head["no"]) and its sequence-classification conversion (built with
--pair-template qwen3-reranker). References: the model card's computation written out in
tests/tiny_llm_rerankers.py (transformers' AutoModelForCausalLM, the template, the middle cut to the room the
prefix and suffix leave, left padding, softmax over "no" and "yes"), and sentence-transformers' CrossEncoder
over the templated pairs where the pairs are not cut (it cuts the pair, suffix included, where the card cuts
only the middle)."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import numpy as np
import pytest

from conftest import start_server
from embtrt.export import build
from embtrt.export.spec_options import spec_from_options
from embtrt.kinds.reranker.serve import RerankClient
from embtrt.repository.manifest import read_manifest
from tiny_llm_rerankers import INSTRUCTION, PREFIX, SUFFIX, make_qwen3_reranker, make_qwen3_reranker_seq_cls, model_card_scores

pytestmark = pytest.mark.integration
TOL = 1e-4


@pytest.fixture(scope="module")
def llm(tmp_path_factory, corpus):
    """(causal folder, seq-cls folder, base) built on python-ort (the causal form by detection, the
    conversion with --pair-template qwen3-reranker), gated on every other corpus text."""
    base = tmp_path_factory.mktemp("llm_rerank")
    causal = make_qwen3_reranker(base / "qwen3-reranker")
    seq = make_qwen3_reranker_seq_cls(base / "qwen3-reranker-seq-cls", causal)
    half = base / "half.json"
    half.write_text(json.dumps(corpus[::2]))
    build(spec_from_options(causal, base / "causal", name="qr"), corpus=half, log=lambda m: None)
    build(spec_from_options(seq, base / "seq", name="qr_seq", pair_template="qwen3-reranker"), corpus=half,
          log=lambda m: None)
    return causal, seq, base


@pytest.fixture(scope="module")
def server(llm, tmp_path_factory):
    _, _, base = llm
    with start_server(base / "causal", tmp_path_factory.mktemp("llm_srv"), base / "seq") as srv:
        yield srv


def _card(causal, query: str, docs: list[str], instruction: str | None = None) -> np.ndarray:
    """The model card's P(yes) of (query, each document), float32 in document order."""
    return np.asarray(model_card_scores(causal, [(query, d) for d in docs], instruction=instruction), np.float32)


def _docs(corpus):
    """A query and 24 documents of mixed lengths, the last far over the max length (its middle is cut)."""
    return corpus[0].split(".")[0], corpus[1:24] + [" ".join(corpus[40:60])]


def test_the_causal_folder_is_a_reranker_with_the_template_and_the_conversion_takes_it(llm):
    causal, _, base = llm
    m = read_manifest(base / "causal")
    assert (m.kind, m.num_labels, m.activation) == ("reranker", 1, "sigmoid")
    tpl = json.loads(m.extra["spec"]["pair_template"])
    assert (tpl["prefix"], tpl["suffix"], tpl["instruction"]) == (PREFIX, SUFFIX, INSTRUCTION)
    assert m.extra["onnx"]["export_validation"]["head"] == "last-token yes - no" and m.extra["parity"]["passed"]
    seq = read_manifest(base / "seq")
    assert json.loads(seq.extra["spec"]["pair_template"]) == tpl and seq.extra["parity"]["passed"]
    assert "--pair-template qwen3-reranker" in seq.extra["rebuild"] and "--pair-template" in m.extra["rebuild"]


def test_both_forms_serve_the_model_cards_scores_and_the_conversion_crossencoders(llm, server, corpus):
    from sentence_transformers import CrossEncoder

    causal, seq, _ = llm
    query, docs = _docs(corpus)
    want = _card(causal, query, docs)
    assert np.ptp(want) > 0.05 and len(np.unique(np.round(want, 4))) == len(docs)   # the tiny model tells pairs apart
    for name in ("qr", "qr_seq"):
        with RerankClient(server.grpc_url, name) as c:
            got, tokens = c.score(query, docs)
            ranked = c.rerank(query, docs, top_n=5)
        assert got.shape == (len(docs), 1) and float(np.abs(got[:, 0] - want).max()) <= TOL, name
        assert [r["index"] for r in ranked] == [int(i) for i in np.argsort(-want, kind="stable")[:5]]
        assert tokens.max() == 256 and tokens.min() < 256   # the long document was cut to the max length
    # sentence-transformers' CrossEncoder over the templated pairs (the pairs it does not cut: it would cut the suffix)
    model = CrossEncoder(str(seq), device="cpu")
    q = PREFIX + f"<Instruct>: {INSTRUCTION}\n<Query>: {query}\n"
    pairs = [(q, "<Document>: " + d + SUFFIX) for d in docs]
    uncut = [i for i, (a, b) in enumerate(pairs) if len(model.tokenizer(a, b)["input_ids"]) < model.max_seq_length]
    assert len(uncut) >= 8
    ce = model.predict([pairs[i] for i in uncut], batch_size=8)
    assert float(np.abs(np.asarray(ce) - want[uncut]).max()) <= TOL


def test_an_instruction_per_request_is_the_model_cards(llm, server, corpus):
    from embtrt.errors import BadRequestError

    causal, _, _ = llm
    query, docs = _docs(corpus)
    docs = docs[:8]
    mine = "Given a sentence, find passages that contradict it"
    want = _card(causal, query, docs, mine)
    default = _card(causal, query, docs)
    assert float(np.abs(want - default).max()) > 1e-3   # the instruction reaches the score
    with RerankClient(server.grpc_url, "qr") as c:
        got, _ = c.score(query, docs, instruction=mine)
        with pytest.raises(BadRequestError, match="instruction 7: must be a string"):
            c.score(query, docs, instruction=7)
    assert float(np.abs(got[:, 0] - want).max()) <= TOL


def test_the_rerank_routes_take_the_instruction_cohere_sdk_tei_and_nim(llm, server, corpus, tmp_path):
    import cohere

    from test_gateway import gateway

    causal, _, base = llm
    query, docs = _docs(corpus)
    docs = docs[:10]
    mine = "Find passages about the same place"
    want = _card(causal, query, docs, mine)
    plain = _card(causal, query, docs)
    with gateway(base / "causal", tmp_path / "gw.log", "--triton", server.grpc_url) as url:
        v2 = cohere.ClientV2(api_key="unused", base_url=url).rerank(
            model="qr", query=query, documents=docs, request_options={"additional_body_parameters": {"instruction": mine}})
        got = np.zeros(len(docs), np.float32)
        for r in v2.results:
            got[r.index] = r.relevance_score
        assert len(v2.results) == len(docs) and float(np.abs(got - want).max()) <= TOL
        tei = httpx.post(f"{url}/rerank", json={"query": query, "texts": docs, "instruction": mine}, timeout=60).json()
        assert len(tei) == len(docs) and max(abs(r["score"] - want[r["index"]]) for r in tei) <= TOL
        nim = httpx.post(f"{url}/v1/ranking", json={"model": "qr", "query": {"text": query},
                                                    "passages": [{"text": d} for d in docs], "truncate": "END"},
                         timeout=60).json()   # END: some pairs are over the max length with the template's tokens
        logit = np.log(plain / (1 - plain))   # NIM's raw score: the logit, no instruction: the template's default
        assert len(nim["rankings"]) == len(docs) and max(abs(r["logit"] - logit[r["index"]]) for r in nim["rankings"]) <= 1e-3
        # the other rank routes' bodies with the instruction: Cohere v1 / Jina, vLLM's /rerank and its score API
        def by_index(rows, key):
            out = np.full(len(docs), np.nan, np.float32)
            for r in rows:
                out[r["index"]] = r[key]
            return out

        for path, body in (("/v1/rerank", {"model": "qr"}), ("/rerank", {})):
            r = httpx.post(f"{url}{path}", json={**body, "query": query, "documents": docs, "instruction": mine}, timeout=60)
            assert r.status_code == 200 and float(np.abs(by_index(r.json()["results"], "relevance_score") - want).max()) <= TOL, path
        score = httpx.post(f"{url}/score", json={"model": "qr", "queries": query, "documents": docs, "instruction": mine},
                           timeout=60)
        assert score.status_code == 200 and float(np.abs(by_index(score.json()["data"], "score") - want).max()) <= TOL
        bad = httpx.post(f"{url}/v1/rerank", json={"model": "qr", "query": query, "documents": docs, "instruction": ["x"]},
                         timeout=60)
        # a pair over the max length with the template's tokens, truncate false: a 400 naming it
        long = httpx.post(f"{url}/rerank", json={"query": query, "texts": ["A short passage.", "Another one.", " ".join(corpus[40:60])],
                                                  "truncate": False}, timeout=60)
    assert bad.status_code == 400 and "instruction must be a string" in bad.text
    assert long.status_code in (400, 413, 422) and "texts[2]" in long.text, long.text


def test_verify_gates_the_served_llm_reranker_against_its_folder(llm, server, tmp_path, corpus):
    causal, _, _ = llm
    (tmp_path / "c.json").write_text(json.dumps(corpus[::3]))
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "verify", "--url", server.grpc_url, "--model", "qr",
                        "--reference", str(causal), "--corpus", str(tmp_path / "c.json")],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "[ok] bucket 256: 192 pairs, max |score - CrossEncoder.predict|" in p.stdout and "[x]" not in p.stdout
    assert "ranking against CrossEncoder.rank's order (192 pairs)" in p.stdout


@pytest.mark.slow   # three builds and a server of their own, as tests/integration/test_kind_targets_served.py: make test-all
def test_every_other_target_serves_the_causal_form_equal_to_the_model_card(llm, corpus, tmp_path):
    """python-torch (the causal LM itself, only the last token's two logits), python-openvino and onnxruntime
    (the exported score row) built from the causal folder (each gated on a sixth of the corpus), served by one
    tritonserver, each equal to the model card's scores (tensorrt: built and gated, its plans pending for the
    GPU host); the onnxruntime target's bucket encoders through
    tests/ort_standin.py (the bundled tritonserver has no onnxruntime backend); `verify --against` of the
    python-torch deployment against the python-ort one passes at the reranker's fp32 bound."""
    from ort_standin import served_copy

    causal, _, base = llm
    few = tmp_path / "few.json"
    few.write_text(json.dumps(corpus[::6]))
    names = {"python-torch": "qr_torch", "python-openvino": "qr_ov", "onnxruntime": "qr_ort"}
    for target, name in names.items():
        build(spec_from_options(causal, tmp_path / name, name=name, target=target), corpus=few, log=lambda m: None)
        m = read_manifest(tmp_path / name)
        assert m.target == target and m.extra["parity"]["passed"] and m.extra["parity"]["max_abs_diff"] <= TOL
    # tensorrt: the gate on the padded precision ONNX here, one plan per bucket pending for the GPU host
    build(spec_from_options(causal, tmp_path / "qr_trt", name="qr_trt", target="tensorrt"), corpus=few, log=lambda m: None)
    trt = read_manifest(tmp_path / "qr_trt")
    assert trt.extra["parity"]["passed"] and trt.extra["parity"]["max_abs_diff"] <= TOL
    assert trt.extra["pending"] == [f"qr_trt_{b}_encoder/1/model.plan" for b in (32, 128, 256)]
    served, stood_in = served_copy(tmp_path / "qr_ort", tmp_path / "qr_ort_served")
    assert stood_in == ["qr_ort_128_encoder", "qr_ort_256_encoder", "qr_ort_32_encoder"]
    query, docs = _docs(corpus)
    want = _card(causal, query, docs)
    with start_server(tmp_path / "qr_torch", tmp_path, tmp_path / "qr_ov", served, base / "causal") as srv:
        for name in names.values():
            with RerankClient(srv.grpc_url, name) as c:
                got, _ = c.score(query, docs)
            assert float(np.abs(got[:, 0] - want).max()) <= TOL, name
        p = subprocess.run([sys.executable, "-m", "embtrt.cli", "verify", "--url", srv.grpc_url, "--model", "qr_torch",
                            "--against", f"{srv.grpc_url}/qr", "--corpus", str(few)], capture_output=True, text=True,
                           timeout=600)
    assert p.returncode == 0 and "against qr at" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]


def test_the_gate_fails_without_the_template_or_with_another_instruction(llm, server, corpus):
    """Planted faults, each a served deployment judged against a wrong reference: the folder's CrossEncoder
    with the pairs as they come (no template), and the template with another instruction; the right
    reference passes on the same scores."""
    from dataclasses import replace

    from embtrt_backend.pair_template import QWEN3_RERANKER

    from embtrt.kinds.reranker.reference import load_cross_encoder
    from embtrt.kinds.reranker.reference_gate import judge
    from embtrt.kinds.reranker.reference_llm import TemplatedReference
    from embtrt.reference.pairs import corpus_pairs

    causal, _, _ = llm
    queries, docs = corpus_pairs(corpus[::3], queries=4, docs=12)
    with RerankClient(server.grpc_url, "qr") as c:
        parts = [c.score(q, ds) for q, ds in zip(queries, docs, strict=True)]
    got, tokens = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    ce = load_cross_encoder(causal)

    def verdict(ref):
        return judge(ref, queries, docs, got, tokens, (32, 128, 256), log=lambda _m: None)

    assert verdict(TemplatedReference(ce, QWEN3_RERANKER)).passed
    assert not verdict(ce).passed
    assert not verdict(TemplatedReference(ce, replace(QWEN3_RERANKER, instruction="Find passages in French"))).passed


def test_the_rerank_command_takes_the_instruction(llm, server, corpus):
    causal, _, _ = llm
    query, docs = _docs(corpus)
    docs = docs[:6]
    mine = "Find passages about the same place"
    want = _card(causal, query, docs, mine)
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "rerank", "--url", server.grpc_url, "--model", "qr", "--query",
                        query, "--instruction", mine, "--json", *docs], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    results = json.loads(p.stdout)["results"]
    assert [r["index"] for r in results] == [int(i) for i in np.argsort(-want, kind="stable")]
    assert max(abs(r["score"] - want[r["index"]]) for r in results) <= TOL
