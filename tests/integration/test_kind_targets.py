"""The onnxruntime target for rerankers and sparse encoders (#31, #32): the front door tokenizes
and plans every bucket, and calls one encoder model per bucket over BLS, which Triton's
onnxruntime backend runs.

The bundled tritonserver has no onnxruntime backend (../shared/FINDINGS.md), so what is checked
here is the build (its gate runs the graph in ONNX Runtime, which that backend runs), the rendered
configs as tritonclient's protobuf parses them, and the repository check. The BLS path itself is
served on a real tritonserver by the --router-encoder bls fixtures (qwen3_ce in test_rerank.py,
splade_if in test_sparse.py), whose bucket encoders run the same graph in the Python backend.
The tensorrt target of these kinds: test_tensorrt_kinds.py.
"""

from __future__ import annotations


import pytest

from conftest import _sparse_corpus
from embtrt.common.files import sha256_file
from embtrt.export import build
from embtrt.export.spec_options import spec_from_options
from embtrt.repository.check import check_repository
from embtrt.repository.config import parse_config
from embtrt.repository.manifest import read_manifest


def _params(cfg) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}


def _assert_bls_repository(repo, name: str, output: str, width: int) -> None:
    m = read_manifest(repo)
    assert (m.target, m.router_encoder, m.backend_profile) == ("onnxruntime", "bls", "onnxruntime-backend:cpu:fp32")
    assert m.models.encoders == tuple(f"{name}_{b}_encoder" for b in m.buckets)
    front = parse_config(repo / name / "config.pbtxt")
    p = _params(front)
    assert (front.backend, p["encoder_mode"], p["encoder_models"]) == ("python", "bls", ",".join(m.models.encoders))
    assert not (repo / name / "1" / "model.onnx").exists()     # the front door runs no graph itself
    for b, enc in zip(m.buckets, m.models.encoders, strict=True):
        cfg = parse_config(repo / enc / "config.pbtxt")
        assert cfg.backend == "onnxruntime" and cfg.max_batch_size == m.bucket_max_batch[b]
        assert [(i.name, list(i.dims)) for i in cfg.input] == [(n, [-1]) for n in m.input_names]
        assert [(o.name, list(o.dims)) for o in cfg.output] == [(output, [width])]
        assert sha256_file(repo / enc / "1" / "model.onnx") == m.extra["onnx"]["sha256"]   # the gated graph
    par = m.extra["parity"]
    assert par["passed"] and par["buckets"] and max(b["max_abs_diff"] for b in par["buckets"].values()) <= 1e-4
    assert check_repository(repo).passed
    deps = (repo / name / "1" / "embtrt_deps.json").read_text()
    assert '"onnxruntime"' not in deps      # the front door imports tokenizers only; the backend runs ORT


def test_a_reranker_builds_for_the_onnxruntime_backend(cross_encoders, tmp_path):
    repo = tmp_path / "ort"
    build(spec_from_options(cross_encoders["bert-ce"], repo, name="ce_ort", target="onnxruntime"), log=lambda m: None)
    _assert_bls_repository(repo, "ce_ort", "logits", 1)
    assert "--target onnxruntime" in read_manifest(repo).extra["rebuild"]


@pytest.mark.slow   # the reranker case above runs by default: make test-all
def test_a_sparse_encoder_builds_for_the_onnxruntime_backend(splade, tmp_path):
    repo = tmp_path / "ort"
    build(spec_from_options(splade[0], repo, name="sp_ort", target="onnxruntime"), log=lambda m: None)
    _assert_bls_repository(repo, "sp_ort", "sparse", read_manifest(repo).dim)


def test_tune_knobs_of_a_bls_reranker_take_its_bucket_encoders_and_no_budget(rerank_repos):
    from embtrt.measure.knobs import BUDGET, knobs_for

    local = {k.name: k.models for k in knobs_for(read_manifest(rerank_repos["bert-ce"]), rerank_repos["bert-ce"])}
    m = read_manifest(rerank_repos["qwen3-ce"])
    bls = {k.name: k.models for k in knobs_for(m, rerank_repos["qwen3-ce"])}
    assert set(local) == {"front.instances", "front.max_queue_delay_us", "front.preferred_batch_sizes",
                          "front.intra_op_threads", "front.run_overhead_tokens"}
    # the bls front door runs no encoder: its threads are no knob there; its bucket encoders' are
    assert set(bls) == (set(local) - {"front.intra_op_threads"}) | {"encoder.instances", "encoder.max_queue_delay_us"}
    assert BUDGET not in bls
    assert bls["encoder.instances"] == m.models.encoders


@pytest.mark.parametrize("kind", ["reranker", "sparse"])
def test_int8_ships_only_behind_the_kinds_reduced_precision_gate(kind, cross_encoders, splade, tmp_path):
    """int8 (ONNX Runtime dynamic quantization, as for embedders): the build runs the kind's
    reduced-precision gate on the quantized graph and either refuses with the figures, leaving
    nothing written, or serves that graph with every reduced limit met. Measured here: both tiny
    models are refused (the BERT cross-encoder by 0.015 in score and overlap 0.975; the SPLADE by
    19-26% of the largest weight), so the refusal is the branch this machine runs."""
    from embtrt.errors import ParityError

    folder = cross_encoders["bert-ce"] if kind == "reranker" else splade[0]
    out = tmp_path / "int8"
    # the sparse gate on the texts the splade fixture's build gated (their reference is cached)
    corpus = _sparse_corpus(tmp_path) if kind == "sparse" else None
    try:
        build(spec_from_options(folder, out, name="k_int8", precision="int8"), corpus=corpus, log=lambda m: None)
    except ParityError as exc:
        assert f"python-ort/int8 {'reranker' if kind == 'reranker' else 'sparse encoder'} fails the gate" in exc.message
        assert "int8 changes the" in exc.hint and "--precision fp32" in exc.hint
        assert not out.exists() and not list(tmp_path.glob(".int8*"))
        return
    m = read_manifest(out)
    par = m.extra["parity"]
    assert par["passed"] and par["precision"] == "int8"
    assert sha256_file(out / "k_int8" / "1" / "model.onnx") == m.extra["onnx"]["served_sha256"] != m.extra["onnx"]["sha256"]


@pytest.mark.parametrize("kind", ["embedder", "reranker"])
def test_onnxruntime_fp16_serves_the_autocast_graph_the_gate_judged(kind, tiny_models, cross_encoders, tmp_path):
    """--target onnxruntime --precision fp16 ships ModelOpt AutoCast's mixed fp16 graph (as the
    tensorrt target's precision ONNX), and the gate judged that graph: before, an embedder so built
    was labelled fp16 and served the fp32 export. (The sparse kind takes the same path: ort_graph.)"""
    import onnx

    folder = tiny_models["bert-cls"] if kind == "embedder" else cross_encoders["bert-ce"]
    out = tmp_path / "fp16"
    build(spec_from_options(folder, out, name="k_fp16", target="onnxruntime", precision="fp16"), log=lambda m: None)
    m = read_manifest(out)
    assert m.precision == "fp16" and m.extra["parity"]["passed"]
    rec = m.extra["precision_onnx"]   # how the served graph was made, recorded as for tensorrt builds
    assert rec["tool"].startswith("modelopt.onnx.autocast") and rec["gate_run"] == "exact" and rec["nodes_low_precision"] > 10
    assert ("query-passage pairs" in rec["calibration_source"]) == (kind == "reranker")
    for enc in m.models.encoders:
        graph = out / enc / "1" / "model.onnx"
        halves = [i for i in onnx.load(str(graph)).graph.initializer if i.data_type == onnx.TensorProto.FLOAT16]
        assert len(halves) >= 10, f"{enc}: {len(halves)} fp16 weights: not the fp16 graph"
        served = m.extra["onnx"].get("served_sha256", m.extra["onnx"]["sha256"])
        assert sha256_file(graph) == served   # the graph the manifest says the gate judged
    if kind == "reranker":   # fp16 moved the scores (the gate saw the fp16 run), within the reduced bound
        assert 1e-5 < m.extra["parity"]["max_abs_diff"] <= 0.01


@pytest.mark.parametrize("kind", ["reranker", pytest.param("sparse", marks=pytest.mark.slow)])   # the same step per kind
def test_a_kind_with_its_own_code_builds_for_the_default_target_only_when_trusted(kind, tmp_path):
    """The classifier's (the MLM's) ONNX export loads the folder's own classes with the build's trust
    (before: it loaded without it and died in transformers while the CrossEncoder / SparseEncoder
    reference had loaded)."""
    from tiny_models import make_remote_code_cross_encoder, make_remote_code_splade

    from embtrt.errors import ModelError

    make, cls = {"reranker": (make_remote_code_cross_encoder, "RemoteBertForSequenceClassification"),
                 "sparse": (make_remote_code_splade, "RemoteBertForMaskedLM")}[kind]
    folder = make(tmp_path / "rc")
    with pytest.raises(ModelError, match=f"runs its own code .*{cls}"):
        spec_from_options(folder, tmp_path / "x")
    out = tmp_path / "r"
    build(spec_from_options(folder, out, name="rc", trust_remote_code=True), log=lambda m: None)
    m = read_manifest(out)
    assert (m.kind, m.target) == (kind, "python-ort")
    par = m.extra["parity"]
    worst = par["max_abs_diff"] if kind == "reranker" else max(b["max_abs_diff"] for b in par["buckets"].values())
    assert par["passed"] and worst <= 1e-4
    assert "--trust-remote-code" in m.extra["rebuild"]
