"""The tensorrt target for rerankers and sparse encoders (#31, #32), on a host without TensorRT.

As for embedders (test_tensorrt.py, test_tensorrt_engines.py): the precision ONNX and the kind's
gate run for real on this CPU, padded to each bucket as a plan runs; the plans are pending, and
`embtrt engines` runs on a "GPU host" (tests/gpu_host.py) against the tensorrt stand-in, whose
plan runs its ONNX in ONNX Runtime. What a real TensorRT engine computes is not checked here.
"""

from __future__ import annotations

import contextlib
import json
import shutil

import onnx
import pytest

from embtrt.common.gpu import tensorrt_available
from embtrt.export import build
from embtrt.export.onnx2trt import PLAN, PLAN_MANIFEST, RECIPE
from embtrt.export.spec_options import spec_from_options
from embtrt.repository.check import check_repository
from embtrt.repository.config import parse_config
from embtrt.repository.manifest import read_manifest
from gpu_host import run_on_gpu_host

TRT_HERE = tensorrt_available()[0]


@contextlib.contextmanager
def _without_tensorrt():
    """Builds here leave the plans pending, on a GPU host as on this one."""
    with pytest.MonkeyPatch.context() as mp:
        if TRT_HERE:
            from embtrt.export import onnx2trt

            mp.setattr(onnx2trt, "tensorrt_available", lambda: (False, "the host without TensorRT is under test"))
        yield


def _build(folder, out, **kw):
    with _without_tensorrt():
        build(spec_from_options(folder, out, **kw), log=lambda m: None)
    return out


class _Builds(dict):
    """Each repository built on first use (the fp16 ones only by the slow tests)."""

    def __init__(self, recipes, base):
        super().__init__()
        self.recipes, self.base = recipes, base

    def __missing__(self, key):
        folder, kw = self.recipes[key]
        self[key] = _build(folder, self.base / key, **kw)
        return self[key]


@pytest.fixture(scope="module")
def trt_kinds(cross_encoders, splade, tmp_path_factory):
    return _Builds({"ce": (cross_encoders["bert-ce"], dict(name="ce_trt", target="tensorrt")),
                    "ce16": (cross_encoders["qwen3-ce"], dict(name="ce_fp16", target="tensorrt", precision="fp16")),
                    "sp": (splade[0], dict(name="sp_trt", target="tensorrt")),
                    "sp16": (splade[0], dict(name="sp_fp16", target="tensorrt", precision="fp16"))},
                   tmp_path_factory.mktemp("trt_kinds"))


FP16 = pytest.mark.slow   # ModelOpt AutoCast builds: make test-all


@pytest.mark.parametrize("key,output", [("ce", "logits"), pytest.param("ce16", "logits", marks=FP16),
                                        pytest.param("sp", "sparse", marks=pytest.mark.slow),
                                        pytest.param("sp16", "sparse", marks=FP16)])
def test_the_repository_has_one_pending_plan_per_bucket_behind_a_front_door_padding_to_buckets(trt_kinds, key, output):
    repo = trt_kinds[key]
    m = read_manifest(repo)
    width = m.num_labels if m.kind == "reranker" else m.dim
    assert (m.target, m.router_encoder) == ("tensorrt", "bls")
    assert m.extra["pending"] == [f"{e}/1/model.plan" for e in m.models.encoders]
    assert m.extra["tensorrt"]["built"] is False and m.extra["precision_onnx"]["gate_run"] == "exact"
    front = {k: v.string_value for k, v in parse_config(repo / m.name / "config.pbtxt").parameters.items()}
    assert (front["encoder_mode"], front["pad_to_bucket"]) == ("bls", "true")   # the gate ran it padded, too
    for b, enc in zip(m.buckets, m.models.encoders, strict=True):
        cfg = parse_config(repo / enc / "config.pbtxt")
        assert cfg.platform == "tensorrt_plan" or cfg.backend == "tensorrt"
        assert [(i.name, list(i.dims)) for i in cfg.input] == [(n, [b]) for n in m.input_names]
        assert [(o.name, list(o.dims)) for o in cfg.output] == [(output, [width])]
        recipe = json.loads((repo / enc / RECIPE).read_text())
        assert recipe["precision"] == m.precision and recipe["max_batch"] == m.bucket_max_batch[b]
        # fp32 plans are built without TF32, whose 10-bit matmul inputs the 1e-4 gate would not hold
        assert recipe["tf32"] is (m.precision != "fp32") and ("--noTF32" in recipe["trtexec"]) is (m.precision == "fp32")
    assert m.extra["parity"]["passed"]
    rep = check_repository(repo, allow_pending_plans=True)
    assert rep.passed and not check_repository(repo).passed   # a pending plan is not a servable repository


@FP16
def test_fp16_kinds_are_judged_by_the_reduced_precision_gates_on_their_fp16_graphs(trt_kinds):
    m = read_manifest(trt_kinds["ce16"])
    par = m.extra["parity"]
    assert (par["precision"], par["tolerance"]) == ("fp16", 1e-2) and 0 < par["max_abs_diff"] <= 1e-2
    sp = read_manifest(trt_kinds["sp16"])
    spar = sp.extra["parity"]
    assert spar["precision"] == "fp16" and spar["passed"] and spar["retrieval"]["overlap"] >= 0.98
    assert 0 < max(b["weight_error"] for b in spar["buckets"].values()) <= 0.02 and 0 < spar["dot_error"] <= 1e-2
    for repo, meta in ((trt_kinds["ce16"], m), (trt_kinds["sp16"], sp)):
        graph = onnx.load(str(repo / meta.models.encoders[0] / "model.onnx"))
        assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in graph.graph.initializer)


def test_kinds_take_each_targets_precisions_as_embedders_do(cross_encoders, splade, tmp_path):
    from embtrt.errors import SpecError
    from embtrt.export.spec import TARGET_PRECISIONS

    # the reduced precisions the kinds took last (each spec reads the folder: a second each)
    opened = [("python-torch", "bf16"), ("onnxruntime", "fp16"), ("tensorrt", "bf16"), ("tensorrt", "fp8")]
    assert all(p in TARGET_PRECISIONS[t] for t, p in opened)
    for folder, kind in ((cross_encoders["bert-ce"], "reranker"), (splade[0], "sparse")):
        for target, p in opened:
            assert spec_from_options(folder, tmp_path / "a", target=target, precision=p).kind == kind
        with pytest.raises(SpecError, match="fp32, int8 for target python-ort"):
            spec_from_options(folder, tmp_path / "b", target="python-ort", precision="bf16")


@pytest.mark.slow   # ModelOpt AutoCast and Q/DQ builds: make test-all
@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_tensorrt_bf16_and_int8_kinds_are_gated_on_the_graph_each_plan_is_built_from(cross_encoders, precision, tmp_path):
    """bf16: one AutoCast graph, which ONNX Runtime cannot run on a CPU, so the gate runs its
    simulation unoptimized (as for embedders); int8: one ModelOpt Q/DQ graph per bucket, each
    bucket's pairs judged on its own graph. Measured on the tiny BERT: bf16 passes (0.003), int8 is
    refused (0.031, overlap 0.925), so int8 is kept here with --allow-mismatch to check what ships."""
    out = tmp_path / "r"
    _build(cross_encoders["bert-ce"], out, name="ce_p", target="tensorrt", precision=precision, allow_mismatch=True)
    m = read_manifest(out)
    par, prec = m.extra["parity"], m.extra["precision_onnx"]
    assert par["precision"] == precision and 0 < par["max_abs_diff"] <= 0.1
    assert par["passed"] if precision == "bf16" else par["allowed_mismatch"]
    files = prec["files"]
    assert set(files) == {str(b) for b in m.buckets}
    if precision == "bf16":
        assert prec["gate_run"] == "simulated" and len({f["onnx_sha256"] for f in files.values()}) == 1
        assert all(f["gate_onnx_sha256"] != f["onnx_sha256"] for f in files.values())
    else:
        assert prec["gate_run"] == "exact" and len({f["onnx_sha256"] for f in files.values()}) == len(m.buckets)
        assert m.extra["onnx"]["served_sha256"] == {b: f["gate_onnx_sha256"] for b, f in files.items()}
    assert sorted(m.extra["pending"]) == sorted(f"{e}/1/model.plan" for e in m.models.encoders)


@pytest.mark.parametrize("key", ["ce", pytest.param("sp", marks=pytest.mark.slow)])
def test_engines_build_the_plans_without_tf32_and_judge_them_by_the_kinds_tolerance(trt_kinds, key, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(trt_kinds[key], repo)
    m = read_manifest(repo)
    p = run_on_gpu_host(f"""
        import json, tensorrt
        from plan_runner import OrtPlanRunner
        from embtrt.export.onnx2trt import build_engines
        states = build_engines({str(repo)!r}, runner_cls=OrtPlanRunner, log=print)
        print("states", json.dumps([s.state for s in states]))
        print("cleared", json.dumps([c[1]["cleared"] for c in tensorrt.CALLS if c[0] == "build"]))
        print("torch loaded", "torch" in sys.modules)
        """, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"states {json.dumps(['ok'] * len(m.buckets))}" in p.stdout and "torch loaded False" in p.stdout
    assert f"cleared {json.dumps([[6]] * len(m.buckets))}" in p.stdout      # BuilderFlag.TF32 of the stand-in
    what = "score" if m.kind == "reranker" else "weight"   # the kind gate's own units: sigmoid scores, weights
    assert p.stdout.count(f"max |{what} difference|") == len(m.buckets)
    assert all((repo / e / PLAN).is_file() for e in m.models.encoders)
    # a plan whose outputs differ from the gated graph beyond the kind's tolerance is refused and removed
    again = tmp_path / "again"
    shutil.copytree(trt_kinds[key], again)
    p = run_on_gpu_host(f"""
        from plan_runner import OrtPlanRunner
        from embtrt.errors import EmbtrtError
        from embtrt.export.onnx2trt import build_engines
        OrtPlanRunner.noise = 0.01
        try:
            build_engines({str(again)!r}, runner_cls=OrtPlanRunner, log=print)
        except EmbtrtError as e:
            print("error:", e.message)
        """, tmp_path)
    first = m.models.encoders[0]
    assert f"[x] {first}: plan vs model.onnx (exact)" in p.stdout and "(limit 1e-04)" in p.stdout, p.stdout + p.stderr
    assert f"error: {first}: the TensorRT plan fails the quality gate and was removed" in p.stdout
    assert not (again / first / PLAN).exists() and not (again / first / PLAN_MANIFEST).exists()


def test_a_rerankers_precision_graphs_are_calibrated_on_the_pairs_it_serves(cross_encoders, corpus):
    """AutoCast's range check and the Q/DQ calibration of a reranker run on query-passage pairs
    tokenized as CrossEncoder.predict tokenizes them (both segments, their segment ids), not on
    single texts, which a cross-encoder never sees."""
    from transformers import AutoTokenizer

    from embtrt.export.precision import calibration_feeds
    from embtrt.reference.pairs import corpus_pairs

    folder = cross_encoders["bert-ce"]
    hf = AutoTokenizer.from_pretrained(str(folder))
    tok_json = folder / "tokenizer.json"
    names = ("input_ids", "attention_mask", "token_type_ids")
    feeds = calibration_feeds(corpus, tok_json, 64, int(hf.pad_token_id), (32, 64), names, 4096, pairs=True)
    singles = calibration_feeds(corpus, tok_json, 64, int(hf.pad_token_id), (32, 64), names, 4096)
    queries, docs = corpus_pairs(corpus)
    ref = hf([q for q, ds in zip(queries, docs, strict=True) for _ in ds], [d for ds in docs for d in ds],
             truncation="longest_first", max_length=64)
    ref_rows = {tuple(r) for r in ref["input_ids"]}
    for b, f in feeds.items():
        assert f["input_ids"].shape[1] == b and (f["token_type_ids"] == 1).any(axis=1).all()   # every row a pair
        for ids, mask in zip(f["input_ids"], f["attention_mask"], strict=True):
            assert tuple(int(x) for x in ids[mask == 1]) in ref_rows   # CrossEncoder's own tokens for a corpus pair
        assert not (singles[b]["token_type_ids"] == 1).any()         # what a reranker was calibrated on before


def test_calibration_takes_the_default_prompt_and_refuses_a_bucket_nothing_fits(cross_encoders, corpus):
    """The query carries the prompt a request without options gets (the front door adds it); a bucket
    no calibration input fits is a clear error (before: rows longer than the bucket, a numpy error)."""
    from transformers import AutoTokenizer

    from embtrt.errors import SpecError
    from embtrt.export.precision import calibration_feeds
    from embtrt.reference.pairs import corpus_pairs

    folder = cross_encoders["bert-ce"]
    hf = AutoTokenizer.from_pretrained(str(folder))
    names = ("input_ids", "attention_mask", "token_type_ids")
    feeds = calibration_feeds(corpus, folder / "tokenizer.json", 64, int(hf.pad_token_id), (64,), names, 4096,
                              pairs=True, prompt="Instruct: rank ")
    queries, docs = corpus_pairs(corpus)
    ref = hf(["Instruct: rank " + q for q, ds in zip(queries, docs, strict=True) for _ in ds], [d for ds in docs for d in ds],
             truncation="longest_first", max_length=64)
    rows = {tuple(r) for r in ref["input_ids"]}
    f = feeds[64]
    assert all(tuple(int(x) for x in ids[m == 1]) in rows for ids, m in zip(f["input_ids"], f["attention_mask"], strict=True))
    with pytest.raises(SpecError, match="no calibration input fits bucket 4"):
        calibration_feeds(corpus, folder / "tokenizer.json", 64, int(hf.pad_token_id), (4, 64), names, 4096, pairs=True)


def test_a_classifiers_plan_is_judged_by_the_classifier_gates_scores_and_logits(classifiers, tmp_path):
    """A classifier built for tensorrt (#68 item 6): its plans are judged in the classifier gate's units, each
    label's score after the pipeline's activation and its logit, under the classifier's tolerance; not as a
    sparse encoder's weights (the rule every kind but the embedder and the reranker used to fall into)."""
    repo = _build(classifiers["bert-cls3"], tmp_path / "clf", name="clf_trt", target="tensorrt")
    assert read_manifest(repo).kind == "classifier"
    p = run_on_gpu_host(f"""
        from plan_runner import OrtPlanRunner
        from embtrt.errors import EmbtrtError
        from embtrt.export.onnx2trt import build_engines
        OrtPlanRunner.noise = 2e-4   # over the classifier's fp32 bound (1e-4) in logits and in softmax scores
        try:
            build_engines({str(repo)!r}, runner_cls=OrtPlanRunner, log=print)
        except EmbtrtError as e:
            print("error:", e.message)
        """, tmp_path)
    assert "max |score or logit difference|" in p.stdout and "(limit 1e-04)" in p.stdout, p.stdout + p.stderr
    assert "the TensorRT plan fails the quality gate and was removed" in p.stdout
