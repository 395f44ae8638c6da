"""The TensorRT target on a machine without TensorRT: everything around the engine build, for real.

TensorRT itself cannot be installed here (PyPI's wheels download from NVIDIA at install
time) and there is no GPU; `configure_builder` is exercised against a recording stand-in
for the `tensorrt` module, and the module is type-checked against `tensorrt-stubs`.
"""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from embtrt.build import build
from embtrt.check import check_repository
from embtrt.errors import DependencyError, SpecError
from embtrt.onnx2trt import (EngineRecipe, HostInfo, PLAN, PLAN_MANIFEST, RECIPE, build_engines, configure_builder,
                             encoder_dirs, plan_status, tensorrt_available)
from embtrt.spec import spec_from_options

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trt_repo(tiny_models, tmp_path_factory):
    out = tmp_path_factory.mktemp("trt") / "repo"
    build(spec_from_options(tiny_models["bert-cls"], out, name="bert", target="tensorrt", precision="fp16",
                            buckets="16,32,64", max_batch_size=16, preferred_batch_sizes="4,16"), log=lambda m: None)
    return out


def test_tensorrt_is_reported_unavailable_with_the_concrete_reason():
    ok, why = tensorrt_available()
    assert not ok
    assert "TensorRT is not importable" in why or "no CUDA device" in why


def test_auto_target_falls_back_to_python_ort_here():
    assert spec_from_options(None, Path("/tmp/x")).target == "python-ort"


def test_tensorrt_repository_renders_passes_the_check_and_lists_pending_plans(trt_repo):
    rep = check_repository(trt_repo, allow_pending_plans=True)
    assert rep.passed, rep.failures()
    assert len(rep.pending) == 3
    assert not check_repository(trt_repo).passed  # without the allowance a missing plan is a failure
    m = json.loads((trt_repo / "embtrt.json").read_text())
    assert m["pending"] == [f"bert_{b}_encoder/1/model.plan" for b in (16, 32, 64)]
    assert m["tensorrt"]["built"] is False and m["tensorrt"]["finish_with"].startswith("embtrt engines ")
    assert m["identity"]["embtrt.backend_profile"] == "tensorrt:gpu:fp16"


def test_profiles_graph_specs_warmup_and_trtexec_agree_with_the_buckets(trt_repo):
    dirs = encoder_dirs(trt_repo)
    assert [d.name for d in dirs] == ["bert_16_encoder", "bert_32_encoder", "bert_64_encoder"]
    for d in dirs:
        L = int(d.name.split("_")[1])
        r = EngineRecipe.load(d / RECIPE)
        assert r.shapes() == {n: ((1, L), (16, L), (16, L)) for n in ("input_ids", "attention_mask", "token_type_ids")}
        cmd = json.loads((d / RECIPE).read_text())["trtexec"]
        assert f"--minShapes=input_ids:1x{L},attention_mask:1x{L},token_type_ids:1x{L}" in cmd
        assert f"--maxShapes=input_ids:16x{L}" in cmd and "--fp16" in cmd and "--timingCacheFile=../embtrt_timing.cache" in cmd
        assert (d / "trtexec.sh").read_text().strip().endswith(cmd)
        assert (d / "model.onnx").is_file()
        cfg = text_format.Parse((d / "config.pbtxt").read_text(), mc.ModelConfig())
        assert cfg.platform == "tensorrt_plan" and cfg.max_batch_size == 16
        assert all(list(t.dims) == [L] for t in cfg.input)
        graph_sizes = [g.batch_size for g in cfg.optimization.cuda.graph_spec]
        assert graph_sizes == [1, 4, 16]
        assert list(cfg.dynamic_batching.preferred_batch_size) == [4, 16]  # = CUDA-graph sizes > 1
        assert all({k: list(v.dim) for k, v in g.input.items()} == {n: [L] for n in r.input_names}
                   for g in cfg.optimization.cuda.graph_spec)
        assert [(w.batch_size, [list(i.dims) for i in w.inputs.values()]) for w in cfg.model_warmup] == \
               [(bs, [[L]] * 3) for bs in graph_sizes]
        assert list(cfg.instance_group[0].profile) == ["0"]
    front = text_format.Parse((trt_repo / "bert" / "config.pbtxt").read_text(), mc.ModelConfig())
    assert front.parameters["pad_to_bucket"].string_value == "true"  # engines have the sequence fixed


def _fake_plan(d: Path, **over):
    r = EngineRecipe.load(d / RECIPE)
    from dataclasses import asdict

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
    _fake_plan(d)
    st = plan_status(d, HostInfo("10.13.0", "NVIDIA A100-SXM4-80GB", "8.0"))
    assert st.state == "foreign"
    assert "NVIDIA H200 (sm 9.0)" in st.message and "cc_model_filenames" in st.message
    assert plan_status(d, HostInfo("10.1.0", "NVIDIA H200", "9.0")).state == "foreign"
    assert check_repository(repo, allow_pending_plans=False).failures() == [
        "bert_32_encoder: missing 1/model.plan", "bert_64_encoder: missing 1/model.plan"]


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


def test_fp8_and_uncalibrated_int8_are_refused_with_a_reason(tiny_models, tmp_path):
    with pytest.raises(SpecError, match="calibration"):
        spec_from_options(tiny_models["bert-cls"], tmp_path / "a", target="tensorrt", precision="int8")
    calib = tmp_path / "calib.txt"
    calib.write_text("a calibration text\n")
    spec = spec_from_options(tiny_models["bert-cls"], tmp_path / "b", target="tensorrt", precision="fp8",
                             calibration_file=calib)
    with pytest.raises(SpecError, match="explicitly quantized"):
        build(spec, log=lambda m: None)
    assert not (tmp_path / "b").exists()


class _Recorder:
    """Stand-in objects that record what the builder config receives."""

    def __init__(self, log, name="obj"):
        self._log, self._name = log, name

    def __getattr__(self, attr):
        def call(*args, **kw):
            self._log.append((f"{self._name}.{attr}", args))
            return _Recorder(self._log, attr)
        return call


def _fake_trt(layer_types):
    class Layer:
        def __init__(self, t):
            self.type, self.precision, self.num_outputs, self.out_types = t, None, 1, {}

        def set_output_type(self, i, dt):
            self.out_types[i] = dt

    class Network:
        def __init__(self):
            self.layers = [Layer(t) for t in layer_types]
            self.num_layers = len(self.layers)

        def get_layer(self, i):
            return self.layers[i]

    class Config:
        def __init__(self, log):
            self.log, self.flags = log, []

        def set_memory_pool_limit(self, pool, size):
            self.log.append(("pool", pool, size))

        def set_flag(self, f):
            self.flags.append(f)

        def add_optimization_profile(self, p):
            self.log.append(("profile", p))

        def create_timing_cache(self, b):
            self.log.append(("cache", b))
            return "cache"

        def set_timing_cache(self, c, ignore):
            self.log.append(("set_cache", c, ignore))

    class Profile:
        def __init__(self):
            self.shapes = {}

        def set_shape(self, name, mn, opt, mx):
            self.shapes[name] = (mn, opt, mx)

    class Builder:
        def __init__(self):
            self.log = []

        def create_builder_config(self):
            self.config = Config(self.log)
            return self.config

        def create_optimization_profile(self):
            self.profile = Profile()
            return self.profile

    trt = types.SimpleNamespace(
        MemoryPoolType=types.SimpleNamespace(WORKSPACE="WORKSPACE"),
        BuilderFlag=types.SimpleNamespace(FP16="FP16", BF16="BF16", INT8="INT8", OBEY_PRECISION_CONSTRAINTS="OBEY"),
        LayerType=types.SimpleNamespace(NORMALIZATION="NORM", SOFTMAX="SOFTMAX", REDUCE="REDUCE"),
        float32="float32", Dims=tuple)
    return trt, Builder(), Network()


@pytest.mark.parametrize("precision,fp32_layers,flags", [
    ("fp32", False, []), ("fp16", False, ["FP16"]), ("bf16", True, ["BF16", "OBEY"]), ("fp16", True, ["FP16", "OBEY"]),
])
def test_builder_config_profile_precision_and_fp32_layers(monkeypatch, precision, fp32_layers, flags):
    trt, builder, network = _fake_trt(["MATMUL", "NORM", "SOFTMAX", "REDUCE", "ELEMENTWISE"])
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    r = EngineRecipe(model="m_128_encoder", bucket=128, onnx="model.onnx", onnx_sha256="x",
                     input_names=("input_ids", "attention_mask"), min_batch=1, opt_batch=16, max_batch=32,
                     precision=precision, fp32_layers=fp32_layers, builder_opt_level=4, workspace_bytes=1 << 30,
                     calibration_file=None)
    config, cache = configure_builder(builder, network, r, b"timing")
    assert config.flags == flags
    assert builder.profile.shapes == {n: ((1, 128), (16, 128), (32, 128)) for n in r.input_names}
    assert ("set_cache", "cache", False) in builder.log and ("cache", b"timing") in builder.log
    assert config.builder_optimization_level == 4
    kept = [layer.type for layer in network.layers if layer.precision == "float32"]
    assert kept == (["NORM", "SOFTMAX", "REDUCE"] if fp32_layers else [])


def test_onnx2trt_type_checks_against_tensorrt_stubs(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "typecheck"))
    from prepare_trt_stubs import prepare

    stubs = prepare(tmp_path / "stubs")
    env = dict(os.environ, MYPYPATH=str(stubs))
    p = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                        "--cache-dir", str(tmp_path / "cache"), str(ROOT / "builder" / "embtrt" / "onnx2trt.py")],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    # and the check has teeth: a misspelt API call is caught
    bad = tmp_path / "bad" / "embtrt"
    bad.mkdir(parents=True)
    for f in ("__init__.py", "errors.py", "modelinfo.py", "onnx2trt.py"):
        (bad / f).write_text((ROOT / "builder" / "embtrt" / f).read_text())
    src = (bad / "onnx2trt.py").read_text().replace("config.set_flag(trt.BuilderFlag.FP16)",
                                                    "config.set_flags(trt.BuilderFlag.FP16)")
    (bad / "onnx2trt.py").write_text(src)
    p = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                        "--cache-dir", str(tmp_path / "cache"), str(bad / "onnx2trt.py")],
                       capture_output=True, text=True, env=env, cwd=tmp_path / "bad")
    assert p.returncode == 1 and "set_flags" in p.stdout


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
