"""Rerankers end to end: cross-encoder folders built as rerankers, served by a real tritonserver,
called over gRPC, equal to sentence-transformers' CrossEncoder.predict and .rank (#31)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from embtrt.errors import BadRequestError, SpecError
from embtrt.repository.manifest import read_manifest

ROUNDS = 1e-4   # fp32: max |served - CrossEncoder.predict|


def _ce(folder, **kw):
    from sentence_transformers import CrossEncoder

    return CrossEncoder(str(folder), device="cpu", **kw)


def _pairs(corpus, n_docs=40):
    """A real query and documents of mixed lengths, one far over any max length."""
    query = corpus[0].split(".")[0]
    docs = corpus[1:n_docs] + [" ".join(corpus[40:60])]
    return query, docs


def _client(server, model):
    from embtrt.kinds.reranker.serve import RerankClient

    return RerankClient(server.grpc_url, model)


def _assert_scores_apart(scores: np.ndarray, what: str) -> None:
    """The model tells the pairs apart (else an equality check on its scores could not fail)."""
    spread = float(np.ptp(scores[:, 0]))
    assert spread > 100 * ROUNDS, f"{what}: scores within {spread:.2e} of each other: a parity check cannot fail"


def test_the_build_records_the_kind_and_gates_against_cross_encoder(rerank_repos):
    m = read_manifest(rerank_repos["bert-ce"])
    assert (m.kind, m.num_labels, m.activation, m.models.front_door) == ("reranker", 1, "sigmoid", "bert_ce")
    assert m.extra["parity"]["passed"] and m.extra["parity"]["ranking"]["within_ties"] == m.extra["parity"]["queries"]
    assert m.extra["parity"]["max_abs_diff"] <= ROUNDS
    mq = read_manifest(rerank_repos["qwen3-ce"])   # a decoder: left padding in sentence-transformers, right here
    assert (mq.kind, mq.activation, mq.extra["parity"]["passed"]) == ("reranker", "sigmoid", True)
    # built with --router-encoder bls: the front door holds no graph, so every score it serves
    # (test_served_scores_and_ranks_equal_cross_encoder[qwen3-ce]) came through the bucket encoders
    assert mq.router_encoder == "bls" and mq.models.encoders == ("qwen3_ce_32_encoder", "qwen3_ce_96_encoder")
    assert not (rerank_repos["qwen3-ce"] / "qwen3_ce" / "1" / "model.onnx").exists()
    assert all((rerank_repos["qwen3-ce"] / e / "1" / "model.onnx").is_file() for e in mq.models.encoders)
    assert m.router_encoder == "local" and m.models.encoders == ()
    m3 = read_manifest(rerank_repos["xlmr-ce3"])
    assert (m3.kind, m3.num_labels, m3.activation) == ("reranker", 3, "identity")
    assert m3.input_names == ("input_ids", "attention_mask")   # XLM-R takes no segment ids


def test_a_kind_that_is_not_the_folders_is_an_error_that_says_what_it_is(cross_encoders, tmp_path):
    from embtrt.export.spec_options import spec_from_options

    with pytest.raises(SpecError, match=r"--kind embedder, but bert-ce is a reranker \(config_sentence_transformers"):
        spec_from_options(cross_encoders["bert-ce"], tmp_path / "a", kind="embedder")
    with pytest.raises(SpecError, match=r"--kind reranker, but .* is an embedder"):
        spec_from_options(None, tmp_path / "b", kind="reranker")
    with pytest.raises(SpecError, match=r"fp32, bf16 for target python-openvino"):   # each target's, as for embedders
        spec_from_options(cross_encoders["bert-ce"], tmp_path / "c", target="python-openvino", precision="int8")
    with pytest.raises(SpecError, match=r"fp32, bf16 for target python-torch"):
        spec_from_options(cross_encoders["bert-ce"], tmp_path / "e", target="python-torch", precision="int8")


@pytest.mark.slow   # a build and a server of its own: make test-all
def test_openvino_bf16_reranker_passes_the_reduced_precision_gate_and_serves_it(cross_encoders, corpus, tmp_path):
    """python-openvino bf16 (AVX-512 bf16 or AMX) on the tiny BERT cross-encoder (the MiniLM one took a minute
    of the slow tier for the same checks): the build's gate is max |score difference| <= 0.01 and a mean
    top-10 overlap with CrossEncoder.rank >= 0.98; served scores meet the same bounds and `embtrt verify`
    judges the deployment with them."""
    ov = pytest.importorskip("openvino")
    caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    if "BF16" not in caps:
        pytest.skip(f"OpenVINO reports no bf16 on this CPU (capabilities: {', '.join(caps)}); the build refuses bf16 here")
    from conftest import start_server

    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    folder = cross_encoders["bert-ce"]
    repo = tmp_path / "bf16"
    build(spec_from_options(folder, repo, name="ce_bf16", target="python-openvino", precision="bf16"), log=lambda m: None)
    par = read_manifest(repo).extra["parity"]
    assert par["passed"] and par["precision"] == "bf16" and par["tolerance"] == 1e-2 and 0 < par["max_abs_diff"] <= 1e-2
    ce = _ce(folder)
    query, docs = _pairs(corpus)
    want = np.asarray(ce.predict([(query, d) for d in docs], batch_size=32), np.float32).reshape(len(docs), -1)
    with start_server(repo, tmp_path) as srv:
        with _client(srv, "ce_bf16") as c:
            got, _ = c.score(query, docs)
        assert float(np.abs(got - want).max()) <= 1e-2
        p = subprocess.run([sys.executable, "-m", "embtrt.cli", "verify", "--url", srv.grpc_url, "--model", "ce_bf16",
                            "--reference", str(folder)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ranking against CrossEncoder.rank's order (192 pairs): top-10 overlap" in p.stdout and "NDCG@10 regression" in p.stdout


@pytest.mark.slow
def test_minilm_with_a_seeded_head_equals_cross_encoder(minilm_cross_encoder, corpus, tmp_path):
    from conftest import start_server

    folder, repo = minilm_cross_encoder
    with start_server(repo, tmp_path) as srv:
        _served_equals_cross_encoder(srv, folder, "minilm_ce", corpus)


@pytest.mark.parametrize("key", ["bert-ce", "qwen3-ce"])
def test_served_scores_and_ranks_equal_cross_encoder(rerank_server, cross_encoders, corpus, key):
    _served_equals_cross_encoder(rerank_server, cross_encoders[key], key.replace("-", "_"), corpus)


def _served_equals_cross_encoder(server, folder, model, corpus):
    ce = _ce(folder)
    query, docs = _pairs(corpus)
    want = np.asarray(ce.predict([(query, d) for d in docs], batch_size=32), np.float32).reshape(len(docs), -1)
    _assert_scores_apart(want, model)
    with _client(server, model) as c:
        got, tokens = c.score(query, docs)
        ranked = c.rerank(query, docs, top_n=10)
        raw, _ = c.score(query, docs, activation="raw")
    assert got.shape == want.shape and float(np.abs(got - want).max()) <= ROUNDS
    ref = ce.rank(query, docs, top_k=10, batch_size=32)
    assert [r["index"] for r in ranked] == [r["corpus_id"] for r in ref]
    assert np.allclose([r["score"] for r in ranked], [r["score"] for r in ref], atol=ROUNDS)
    import torch

    logits = ce.predict([(query, d) for d in docs], activation_fn=torch.nn.Identity())
    assert float(np.abs(raw[:, 0] - logits).max()) <= ROUNDS
    lens = [len(ce.tokenizer(query, d, truncation="longest_first", max_length=ce.max_seq_length)["input_ids"]) for d in docs]
    assert tokens.tolist() == lens and max(lens) == ce.max_seq_length   # the long document was cut, as predict cuts it


def test_three_labels_identity_softmax_and_raw(rerank_server, cross_encoders, corpus):
    ce = _ce(cross_encoders["xlmr-ce3"])
    query, docs = _pairs(corpus, 20)
    pairs = [(query, d) for d in docs]
    want = ce.predict(pairs)
    soft = ce.predict(pairs, apply_softmax=True)
    _assert_scores_apart(want, "xlmr-ce3")
    with _client(rerank_server, "xlmr_ce3") as c:
        got, _ = c.score(query, docs)
        got_soft, _ = c.score(query, docs, activation="softmax")
        with pytest.raises(Exception, match="3 labels: a classifier"):
            c.rerank(query, docs)
    assert got.shape == (len(docs), 3) and float(np.abs(got - want).max()) <= ROUNDS
    assert float(np.abs(got_soft - soft).max()) <= ROUNDS


def test_a_prompt_is_prepended_to_the_query_as_cross_encoder_does(rerank_server, cross_encoders, corpus):
    ce = _ce(cross_encoders["bert-ce"])
    query, docs = _pairs(corpus, 12)
    want = ce.predict([(query, d) for d in docs], prompt_name="query")
    plain = ce.predict([(query, d) for d in docs])
    assert float(np.abs(want - plain).max()) > 100 * ROUNDS   # the prompt changes the scores
    with _client(rerank_server, "bert_ce") as c:
        got, _ = c.score(query, docs, prompt_name="query")
        with pytest.raises(BadRequestError, match="prompt_name 'passage': this model's prompts are query"):
            c.score(query, docs, prompt_name="passage")
    assert float(np.abs(got[:, 0] - want).max()) <= ROUNDS


def test_truncation_left_and_truncate_false(rerank_server, cross_encoders, corpus):
    ce = _ce(cross_encoders["bert-ce"])
    query, docs = _pairs(corpus, 10)
    ce.tokenizer.truncation_side = "left"
    want = ce.predict([(query, d) for d in docs])
    with _client(rerank_server, "bert_ce") as c:
        got, _ = c.score(query, docs, truncation_direction="left")
        assert float(np.abs(got[:, 0] - want).max()) <= ROUNDS
        short, _ = c.score("a query", ["one", "two words", "three short words"], truncate=False)  # within the max
        assert short.shape == (3, 1)
        lens = [len(ce.tokenizer(query, d)["input_ids"]) for d in docs]
        first = next(i for i, n in enumerate(lens) if n > 64)
        with pytest.raises(BadRequestError, match=rf"row {first}: the pair is longer than the max length 64 tokens"):
            c.score(query, docs, truncate=False)


def test_bad_requests_are_invalid_argument_and_the_server_keeps_serving(rerank_server):
    import tritonclient.grpc as grpcclient

    from embtrt.serve.wire import text_input

    c = grpcclient.InferenceServerClient(rerank_server.grpc_url)
    try:
        cases = [
            ([text_input(["q", "q"], "QUERY"), text_input(["d"], "DOCUMENT")], None, "QUERY.* batch size does not match"),
            ([text_input(["q"], "QUERY"), text_input(["d"], "DOCUMENT")], {"activation": "tanh"}, "activation 'tanh'"),
            ([text_input(["q"], "QUERY"), text_input(["d"], "DOCUMENT")], {"dimensions": 8}, "unknown request parameter"),
            ([text_input(["q"], "QUERY"), text_input(["d"], "DOCUMENT")], {"truncation_direction": "up"},
             "truncation_direction 'up'"),
        ]
        for inputs, params, msg in cases:
            with pytest.raises(Exception, match=msg) as err:
                c.infer("bert_ce", inputs, parameters=params)
            assert "INVALID_ARG" in str(err.value) or "StatusCode.INVALID_ARGUMENT" in repr(err.value.status()), err.value
        r = c.infer("bert_ce", [text_input(["", "q"], "QUERY"), text_input(["d", ""], "DOCUMENT")])
        assert r.as_numpy("SCORES").shape == (2, 1)   # empty texts are pairs CrossEncoder scores too
    finally:
        c.close()


def test_probe_and_the_cli_rank_a_reranker(rerank_server, cross_encoders, corpus):
    from embtrt.serve.probe import probe_models

    assert probe_models(rerank_server.grpc_url, ["bert_ce", "xlmr_ce3"]).ok
    query, docs = _pairs(corpus, 6)
    out = subprocess.run([sys.executable, "-m", "embtrt.cli", "rerank", "--url", rerank_server.grpc_url, "--model", "bert_ce",
                          "--query", query, "--top-n", "3", "--json", *docs], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)["results"]
    ref = _ce(cross_encoders["bert-ce"]).rank(query, docs, top_k=3, return_documents=True)
    assert [(r["index"], r["document"]) for r in got] == [(r["corpus_id"], r["text"]) for r in ref]


@pytest.mark.slow
def test_verify_gates_a_served_reranker_also_under_load_and_against_another(rerank_server, cross_encoders):
    from embtrt.common.corpus import load_corpus
    from embtrt.kinds.reranker.measure import verify_reranker

    texts = load_corpus()
    rep = verify_reranker(rerank_server.grpc_url, "bert_ce", cross_encoders["bert-ce"], texts, under_load=True,
                          concurrency=8, log=lambda _m: None)
    assert rep.passed, rep.lines
    assert rep.figures["gate"]["ranking"]["within_ties"] == rep.figures["gate"]["queries"] == 8
    assert rep.figures["under_load"]["failed"] == 0 and rep.figures["under_load"]["max_abs_diff"] <= ROUNDS
    wrong = verify_reranker(rerank_server.grpc_url, "qwen3_ce", cross_encoders["bert-ce"], texts, log=lambda _m: None)
    assert not wrong.passed and any("bucket" in f for f in wrong.failures)   # another model's scores fail the gate
    other = verify_reranker(rerank_server.grpc_url, "bert_ce", None, texts,
                            against=(rerank_server.grpc_url, "qwen3_ce"), log=lambda _m: None)
    assert not other.passed                                                   # two different models differ
    same = verify_reranker(rerank_server.grpc_url, "bert_ce", None, texts, against=(rerank_server.grpc_url, "bert_ce"),
                           log=lambda _m: None)
    assert same.passed and same.figures["against"]["max_abs_diff"] == 0.0
    cli = subprocess.run([sys.executable, "-m", "embtrt.cli", "verify", "--url", rerank_server.grpc_url, "--model",
                          "bert_ce", "--reference", str(cross_encoders["bert-ce"]), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["kind"] == "reranker"
    cli = subprocess.run([sys.executable, "-m", "embtrt.cli", "verify", "--url", rerank_server.grpc_url, "--model",
                          "bert_ce", "--reference", str(cross_encoders["xlmr-ce3"])], capture_output=True, text=True,
                         timeout=300)
    assert cli.returncode != 0   # a gate that fails exits non-zero (4), or refuses the mismatched reference


@pytest.mark.slow
def test_bench_rerank_scenarios_beside_cross_encoder_in_process(rerank_server, cross_encoders, tmp_path):
    out = subprocess.run([sys.executable, "-m", "embtrt.cli", "bench", "--url", rerank_server.grpc_url, "--model", "bert_ce",
                          "--rerank-documents", "1,10", "--concurrency", "1,2", "--requests", "6", "--warmup", "1",
                          "--reference", str(cross_encoders["bert-ce"]), "--json", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["results"]
    served = [r for r in rows if r["target"] == "triton:bert_ce"]
    assert [(r["documents"], r["concurrency"]) for r in served] == [(1, 1), (1, 2), (10, 1), (10, 2)]
    assert all(r["errors"] == 0 and r["requests"] == 6 and r["pairs_per_s"] > 0 for r in served)
    assert {r["documents"] for r in rows if r["target"].startswith("inprocess:")} == {1, 10}
    assert (tmp_path / "results.md").is_file()
