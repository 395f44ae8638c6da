"""The TensorRT target on a machine without TensorRT: everything around the engine build, for real.

TensorRT itself cannot be installed here (PyPI's wheels download from NVIDIA at install
time) and there is no GPU. The precision ONNX (ModelOpt AutoCast / Q/DQ) and its quality
gate run for real on this CPU; the engines path runs against a stand-in for `tensorrt`
(tests/fakes, its names checked against the real bindings in test_tensorrt_names.py) and
is type-checked against `tensorrt-stubs`.
"""

import contextlib
import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from embtrt.export import build
from embtrt.reference.torch_ref import st_embed
from embtrt.repository.check import check_repository
from embtrt.errors import DependencyError, ParityError
from embtrt.common.files import sha256_file
from embtrt.export.onnx2trt import (GATE_ONNX, PLAN, PLAN_MANIFEST, RECIPE, EngineRecipe, HostInfo, build_engines, encoder_dirs,
                             plan_status, tensorrt_available)
from embtrt.export.spec_options import spec_from_options
from parity_helpers import assert_discriminating, assert_reduced_precision, onnx_file_vectors

ROOT = Path(__file__).resolve().parents[2]
# This file tests the TensorRT target on a host without TensorRT. On a GPU host with TensorRT
# (`make test` there) the builds below are made as on a host without it, and the tests of the
# missing-TensorRT messages are skipped with the reason; tests/gpu covers that host.
TRT_HERE, TRT_WHY = tensorrt_available()
WITHOUT_TRT = "TensorRT and a GPU are on this host: the host without them is what this test covers"
REMOVED_TRTEXEC = ("--fp16", "--bf16", "--int8", "--fp8", "--int4", "--best", "--calib", "--precisionConstraints",
                   "--layerPrecisions", "--layerOutputTypes")


def _quiet(_m):
    pass


@contextlib.contextmanager
def _as_on_a_host_without_tensorrt():
    """Builds here write recipes and leave the plans pending, on a GPU host as on this one."""
    with pytest.MonkeyPatch.context() as mp:
        if TRT_HERE:
            from embtrt.export import onnx2trt

            mp.setattr(onnx2trt, "tensorrt_available", lambda: (False, WITHOUT_TRT))
        yield


@pytest.fixture(scope="module")
def trt_repo(tiny_models, tmp_path_factory):
    """fp16, with a token budget that gives the 64-token bucket a smaller batch."""
    out = tmp_path_factory.mktemp("trt") / "repo"
    with _as_on_a_host_without_tensorrt():
        build(spec_from_options(tiny_models["bert-cls"], out, name="bert", target="tensorrt", precision="fp16",
                                buckets="16,32,64", max_batch_size=16, preferred_batch_sizes="4,16", max_batch_tokens=512),
              log=_quiet)
    return out


def _elem_types(path: Path) -> set[int]:
    m = onnx.load(str(path))
    types = {t.data_type for t in m.graph.initializer}
    types |= {vi.type.tensor_type.elem_type for vi in m.graph.value_info}
    return types


def test_tensorrt_availability_comes_with_the_concrete_reason():
    """Where TensorRT and a GPU are missing, the reason names which; where both are here, none."""
    ok, why = tensorrt_available()
    if ok:
        assert why == ""
    else:
        assert "TensorRT is not importable" in why or "GPU" in why or "NVML" in why, why


def test_auto_target_is_tensorrt_where_it_is_available_else_python_ort():
    assert spec_from_options(None, Path("/tmp/x")).target == ("tensorrt" if TRT_HERE else "python-ort")


def test_fp16_build_writes_a_gated_mixed_precision_onnx_per_bucket(trt_repo, tiny_models, corpus):
    m = json.loads((trt_repo / "embtrt.json").read_text())
    assert m["parity"]["passed"] and m["parity"]["graph"] == "exact"
    # the precision ONNX of each bucket, run here by ONNX Runtime at its bucket's shape, against
    # SentenceTransformer.encode (not the figures the build wrote into its manifest)
    from tokenizers import Tokenizer

    folder = tiny_models["bert-cls"]
    assert_discriminating(folder, corpus[:64])
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    lengths = [len(e.ids) for e in tok.encode_batch(corpus)]
    lo = 0
    for L in (16, 32, 64):
        texts = [t for t, n in zip(corpus, lengths, strict=True) if lo < n <= L or (L == 64 and n > L)]
        assert len(texts) >= 20, L
        got = onnx_file_vectors(trt_repo / f"bert_{L}_encoder" / "model.onnx", folder, texts, "cls", 64, pad_to=L)
        assert_reduced_precision(st_embed(folder, texts), got, what=f"fp16 ONNX of bucket {L}")
        lo = L
    prec = m["precision_onnx"]
    assert prec["precision"] == "fp16" and prec["gate_run"] == "exact"
    assert prec["tool"] == "modelopt.onnx.autocast.convert_to_mixed_precision" and prec["keep_io_types"]
    for d in encoder_dirs(trt_repo):
        r = EngineRecipe.load(d / RECIPE)
        onnx_file = d / "model.onnx"
        assert r.onnx_sha256 == sha256_file(onnx_file) == prec["files"][str(r.bucket)]["onnx_sha256"]
        assert r.gate_onnx == "model.onnx" and r.gate_run == "exact" and r.strongly_typed
        g = onnx.load(str(onnx_file))
        assert onnx.TensorProto.FLOAT16 in _elem_types(onnx_file)           # reduced precision is in the graph
        assert {i.type.tensor_type.elem_type for i in g.graph.input} == {onnx.TensorProto.INT64}
        assert [o.type.tensor_type.elem_type for o in g.graph.output] == [onnx.TensorProto.FLOAT]
        types = {vi.name: vi.type.tensor_type.elem_type for vi in g.graph.value_info}
        head = [n for n in g.graph.node if n.name.count("/") == 1 and n.op_type in ("ReduceSum", "Div", "ReduceL2", "Gather")]
        assert all(types.get(o, onnx.TensorProto.FLOAT) == onnx.TensorProto.FLOAT for n in head for o in n.output)


def test_trtexec_is_strongly_typed_and_free_of_removed_flags(trt_repo):
    for d in encoder_dirs(trt_repo):
        cmd = json.loads((d / RECIPE).read_text())["trtexec"]
        assert "--stronglyTyped" in cmd and "--onnx=model.onnx" in cmd
        assert not [f for f in REMOVED_TRTEXEC if f in cmd.split() or any(a.startswith(f + "=") for a in cmd.split())]
        assert (d / "trtexec.sh").read_text().strip().endswith(cmd)
    # no precision flag is ever set: the one flag named is TF32, cleared for fp32 kinds' plans
    src = (ROOT / "builder" / "embtrt" / "export" / "onnx2trt.py").read_text()
    assert set(re.findall(r"BuilderFlag\.(\w+)", src)) == {"TF32"} and "set_flag" not in src


def test_token_budget_sets_each_buckets_batch_profile_graphs_and_warmup(trt_repo):
    want = {16: 16, 32: 16, 64: 8}   # min(16, 512 // L)
    prefs = {16: [4, 16], 32: [4, 16], 64: [4]}
    for d in encoder_dirs(trt_repo):
        L = int(d.name.split("_")[1])
        r = EngineRecipe.load(d / RECIPE)
        assert r.max_batch == want[L] and r.max_batch_tokens == 512
        assert r.shapes() == {n: ((1, L), (max(prefs[L]), L), (want[L], L))
                              for n in ("input_ids", "attention_mask", "token_type_ids")}
        cmd = json.loads((d / RECIPE).read_text())["trtexec"]
        assert f"--minShapes=input_ids:1x{L},attention_mask:1x{L},token_type_ids:1x{L}" in cmd
        assert f"--maxShapes=input_ids:{want[L]}x{L}" in cmd and "--timingCacheFile=../embtrt_timing.cache" in cmd
        cfg = text_format.Parse((d / "config.pbtxt").read_text(), mc.ModelConfig())
        assert cfg.platform == "tensorrt_plan" and cfg.max_batch_size == want[L]
        assert all(list(t.dims) == [L] for t in cfg.input)
        graph_sizes = [g.batch_size for g in cfg.optimization.cuda.graph_spec]
        assert graph_sizes == [1, *prefs[L]]
        assert list(cfg.dynamic_batching.preferred_batch_size) == prefs[L]  # = CUDA-graph sizes > 1
        assert [(w.batch_size, [list(i.dims) for i in w.inputs.values()]) for w in cfg.model_warmup] == \
               [(bs, [[L]] * 3) for bs in graph_sizes]
        assert list(cfg.instance_group[0].profile) == ["0"]
        for model in (f"bert_{L}", f"bert_{L}_tokenizer"):
            sub = text_format.Parse((trt_repo / model / "config.pbtxt").read_text(), mc.ModelConfig())
            assert sub.max_batch_size == want[L]
    front = text_format.Parse((trt_repo / "bert" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert front.max_batch_size == 16
    assert front.parameters["pad_to_bucket"].string_value == "true"  # engines have the sequence fixed
    assert front.parameters["encoder_max_batch_sizes"].string_value == "16,16,8"
    rep = check_repository(trt_repo, allow_pending_plans=True)
    assert rep.passed, rep.failures()
    assert any("token budget 512: max batch per bucket 16:16, 32:16, 64:8" in line for line in rep.lines())


def test_check_flags_a_config_or_recipe_that_disagrees_with_the_budget(trt_repo, tmp_path):
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(trt_repo, repo)
    cfg = repo / "bert_64_encoder" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("max_batch_size: 8", "max_batch_size: 16"))
    rec = repo / "bert_32_encoder" / RECIPE
    doc = json.loads(rec.read_text())
    doc["max_batch"] = 32
    rec.write_text(json.dumps(doc))
    fails = check_repository(repo, allow_pending_plans=True).failures()
    assert "bert_64_encoder: max_batch_size 16, the budget gives 8 for the 64-token bucket" in fails
    assert any(f.startswith("bert_32_encoder: recipe batch 1..32") for f in fails)
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "check", str(repo)], capture_output=True, text=True)
    assert p.returncode == 5 and "the budget gives 8" in p.stdout


def test_tensorrt_repository_passes_the_check_and_lists_pending_plans(trt_repo):
    rep = check_repository(trt_repo, allow_pending_plans=True)
    assert rep.passed, rep.failures()
    assert len(rep.pending) == 3
    assert not check_repository(trt_repo).passed  # without the allowance a missing plan is a failure
    m = json.loads((trt_repo / "embtrt.json").read_text())
    assert m["pending"] == [f"bert_{b}_encoder/1/model.plan" for b in (16, 32, 64)]
    assert m["tensorrt"]["built"] is False and m["tensorrt"]["finish_with"].startswith("embtrt engines ")
    assert m["identity"]["embtrt.backend_profile"] == "tensorrt:gpu:fp16"


def test_bf16_is_gated_on_a_simulation_and_says_so(tiny_models, tmp_path):
    lines = []
    with _as_on_a_host_without_tensorrt():
        res = build(spec_from_options(tiny_models["qwen3-last"], tmp_path / "r", name="q", target="tensorrt",
                                      precision="bf16"), log=lines.append)
    m = res.manifest
    assert m["parity"]["passed"] and m["parity"]["graph"] == "simulated"
    assert m["precision_onnx"]["gate_run"] == "simulated" and "not the graph itself" in m["precision_onnx"]["notes"][0]
    assert any(line.startswith("[note] the gate ran a simulated bf16 graph") for line in lines)
    for d in encoder_dirs(tmp_path / "r"):
        r = EngineRecipe.load(d / RECIPE)
        assert r.gate_onnx == GATE_ONNX and r.gate_run == "simulated"
        assert r.onnx_sha256 == sha256_file(d / "model.onnx") and r.gate_onnx_sha256 == sha256_file(d / GATE_ONNX)
        assert onnx.TensorProto.BFLOAT16 in _elem_types(d / "model.onnx")       # the plan is built from bf16
        assert onnx.TensorProto.BFLOAT16 not in _elem_types(d / GATE_ONNX)      # the gate ran fp32 + rounding
        assert sum(n.op_type == "Cast" for n in onnx.load(str(d / GATE_ONNX)).graph.node) > \
               sum(n.op_type == "Cast" for n in onnx.load(str(d / "model.onnx")).graph.node)


@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_qdq_onnx_per_bucket_is_judged_and_refused_with_figures(tiny_models, tmp_path, precision):
    spec = spec_from_options(tiny_models["qwen3-last"], tmp_path / "r", name="q", target="tensorrt", precision=precision)
    with pytest.raises(ParityError) as ei:
        build(spec, log=_quiet)
    assert f"tensorrt/{precision} encoders fail the quality gate: bucket <=32: cosine p50 0." in ei.value.message
    assert "use --precision fp16" in ei.value.hint
    assert not (tmp_path / "r").exists()  # nothing half-written
    with _as_on_a_host_without_tensorrt():
        res = build(spec.with_(allow_mismatch=True), log=_quiet)
    m = res.manifest
    assert not m["parity"]["passed"] and m["parity"]["allowed_mismatch"] is True
    shas = set()
    for d in encoder_dirs(tmp_path / "r"):
        g = onnx.load(str(d / "model.onnx"))
        assert sum(n.op_type == "QuantizeLinear" for n in g.graph.node) > 10
        r = EngineRecipe.load(d / RECIPE)
        shas.add(r.onnx_sha256)
        assert m["precision_onnx"]["buckets"][str(r.bucket)]["qdq_pairs"] > 10
    assert len(shas) == 2  # calibrated per bucket shape: one graph per bucket


def _fake_plan(d: Path, **over):
    from dataclasses import asdict

    r = EngineRecipe.load(d / RECIPE)
    (d / PLAN).write_bytes(b"plan")
    man = {"tensorrt": "10.13.0", "gpu": "NVIDIA H200", "compute_capability": "9.0", "onnx_sha256": r.onnx_sha256,
           "recipe": asdict(r)}
    man.update(over)
    (d / PLAN_MANIFEST).write_text(json.dumps(man))


def test_missing_stale_and_foreign_plans_are_detected(trt_repo, tmp_path):
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(trt_repo, repo)
    d = repo / "bert_16_encoder"
    host = HostInfo("10.13.0", "NVIDIA H200", "9.0")
    assert plan_status(d, host).state == "missing"
    _fake_plan(d)
    assert plan_status(d, host).state == "ok"
    _fake_plan(d, onnx_sha256="0" * 64)
    assert plan_status(d, host).state == "stale"
    # a plan built by an embtrt before the recipe's tf32 field (TF32 on, as the default says) is current
    older = {k: v for k, v in EngineRecipe.load(d / RECIPE).__dict__.items() if k != "tf32"}
    _fake_plan(d, recipe=older)
    assert plan_status(d, host).state == "ok"
    _fake_plan(d, recipe={**older, "tf32": False})      # built without TF32, while the recipe has it on
    assert plan_status(d, host).state == "stale"
    _fake_plan(d)
    st = plan_status(d, HostInfo("10.13.0", "NVIDIA A100-SXM4-80GB", "8.0"))
    assert st.state == "foreign"
    assert "NVIDIA H200 (sm 9.0)" in st.message and "cc_model_filenames" in st.message
    assert plan_status(d, HostInfo("10.1.0", "NVIDIA H200", "9.0")).state == "foreign"
    assert check_repository(repo, allow_pending_plans=False).failures() == [
        "bert_32_encoder: missing 1/model.plan", "bert_64_encoder: missing 1/model.plan"]


@pytest.mark.skipif(TRT_HERE, reason=WITHOUT_TRT)
def test_engines_without_tensorrt_gives_the_documented_message(trt_repo):
    with pytest.raises(DependencyError) as ei:
        build_engines(trt_repo, log=lambda m: None)
    assert "cannot build TensorRT engines here" in ei.value.message
    assert f"embtrt engines {trt_repo}" in ei.value.hint
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "engines", str(trt_repo)], capture_output=True, text=True)
    assert p.returncode == 8 and "GPU host" in p.stderr
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "engines", str(trt_repo), "--check"],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "[missing] bert_16_encoder" in p.stdout


def test_onnx2trt_type_checks_against_tensorrt_stubs(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "typecheck"))
    from prepare_trt_stubs import prepare

    stubs = prepare(tmp_path / "stubs")
    env = dict(os.environ, MYPYPATH=str(stubs))
    p = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                        "--cache-dir", str(tmp_path / "cache"), str(ROOT / "builder" / "embtrt" / "export" / "onnx2trt.py")],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    # and the check has teeth: a misspelt API call is caught (the copy's own embtrt imports not followed:
    # from a copy outside the checkout mypy would analyse transformers and torch, ~40 s; the stubs are read either way)
    bad = tmp_path / "bad" / "embtrt"
    shutil.copytree(ROOT / "builder" / "embtrt", bad, ignore=shutil.ignore_patterns("__pycache__", "data"))
    src = (bad / "export" / "onnx2trt.py").read_text().replace("config.set_memory_pool_limit(", "config.set_memory_pool_limits(")
    (bad / "export" / "onnx2trt.py").write_text(src)
    p = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--follow-imports=skip",
                        "--cache-dir", str(tmp_path / "cache"), str(bad / "export" / "onnx2trt.py")],
                       capture_output=True, text=True, env=env, cwd=tmp_path / "bad")
    assert p.returncode == 1 and "set_memory_pool_limits" in p.stdout


def test_onnxruntime_target_renders_valid_configs_and_passes_parity(tiny_models, tmp_path):
    out = tmp_path / "ort"
    res = build(spec_from_options(tiny_models["xlmr-mean"], out, name="xlmr", target="onnxruntime", ort_threads=2),
                log=lambda m: None)
    assert res.manifest["parity"]["passed"] and check_repository(out).passed
    cfg = text_format.Parse((out / "xlmr_32_encoder" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert cfg.backend == "onnxruntime" and cfg.optimization.graph.level == 1
    assert cfg.parameters["intra_op_thread_count"].string_value == "2"
    assert cfg.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert (out / "xlmr_32_encoder" / "1" / "model.onnx").is_file()


def test_the_tensorrt_name_check_takes_whole_names_only():
    """tests/typecheck/trt_names.py: a name the linker merged into a longer string counts only from
    where a part of that identifier starts; a piece of a name never passes."""
    sys.path.insert(0, str(ROOT / "tests" / "typecheck"))
    import trt_names

    wheels = trt_names.fetch_wheels(Path(sys.prefix) / "trt-bindings")
    for version, wheel in wheels.items():
        b = trt_names.Bindings(wheel)
        for name in ("Builder", "Logger", "num_errors", "create_network", "OnnxParser"):
            assert b.has(name), (version, name)
        for piece in ("uilder", "ogger", "um_errors", "reate_network", "nnxParser", "NT8"):
            assert not b.has(piece), (version, piece)
