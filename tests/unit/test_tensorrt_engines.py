"""`embtrt engines` on a "GPU host" without PyTorch: the whole path around TensorRT, for real.

A subprocess (tests/gpu_host.py) puts the stand-ins for `tensorrt` and `pynvml` (tests/fakes;
their names are checked against the real libraries in test_tensorrt_names.py) first on the path
and makes `import torch` / `import transformers` fail, as in Triton's TensorRT images. Everything else
is real: recipes, sha256 checks, the strongly typed network flag, profiles from the token
budget, the timing cache, plan manifests, stale/foreign detection, and the plan-vs-ONNX gate
with ONNX Runtime on real text (the fake plan runs its ONNX).
"""

import json
import shutil
import subprocess
import sys

import pytest

from embtrt.export import build
from embtrt.export.onnx2trt import PLAN, PLAN_MANIFEST, TIMING_CACHE, encoder_dirs
from embtrt.common.gpu import tensorrt_available
from embtrt.export.spec import Gate
from embtrt.export.spec_options import spec_from_options
from gpu_host import run_on_gpu_host

TRT_HERE = tensorrt_available()[0]   # on a GPU host the fixture's build leaves plans pending all the same
WITHOUT_TRT = "TensorRT and a GPU are on this host: the host without them is what this test covers"


@pytest.fixture(scope="module")
def fp16_repo(tiny_models, tmp_path_factory):
    out = tmp_path_factory.mktemp("engines") / "repo"
    with pytest.MonkeyPatch.context() as mp:
        if TRT_HERE:
            from embtrt.export import onnx2trt

            mp.setattr(onnx2trt, "tensorrt_available", lambda: (False, WITHOUT_TRT))
        build(spec_from_options(tiny_models["qwen3-last"], out, name="q", target="tensorrt", precision="fp16",
                                max_batch_size=16, max_batch_tokens=1024), log=lambda m: None)
    return out


def test_engines_build_strongly_typed_plans_and_check_them_without_torch(fp16_repo, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(fp16_repo, repo)
    p = run_on_gpu_host(f"""
        import json, tensorrt
        from plan_runner import OrtPlanRunner
        from embtrt.export.onnx2trt import build_engines, check_plans, tensorrt_available
        print("available", tensorrt_available())
        states = build_engines({str(repo)!r}, runner_cls=OrtPlanRunner, log=print)
        print("states", json.dumps([[s.model, s.state] for s in states]))
        print("calls", json.dumps(tensorrt.CALLS))
        again = build_engines({str(repo)!r}, runner_cls=OrtPlanRunner, log=print)
        print("again", json.dumps([[s.model, s.state] for s in again]))
        print("check", json.dumps([[s.model, s.state] for s in check_plans({str(repo)!r})]))
        print("torch loaded", "torch" in sys.modules, "transformers" in sys.modules)
        """, tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "available (True, '')" in out
    assert 'states [["q_32_encoder", "ok"], ["q_96_encoder", "ok"]]' in out
    assert "torch loaded False False" in out
    calls = json.loads(next(line for line in out.splitlines() if line.startswith("calls "))[6:])
    creates = [c for c in calls if c[0] == "create_network"]
    assert creates and all(flags == 1 << 1 for _, flags in creates)  # 1 << STRONGLY_TYPED, nothing else
    builds = [c[1] for c in calls if c[0] == "build"]
    assert [b["shapes"]["input_ids"] for b in builds] == [[[1, 32], [16, 32], [16, 32]], [[1, 96], [8, 96], [10, 96]]]
    assert all(b["workspace"] == 4 << 30 and b["opt_level"] == 3 for b in builds)
    assert out.count("[ok] q_32_encoder: plan vs model.onnx (exact) on") == 1   # parity checked once, when built
    assert 'again [["q_32_encoder", "ok"], ["q_96_encoder", "ok"]]' in out and out.count("building q_32") == 1
    assert 'check [["q_32_encoder", "ok"], ["q_96_encoder", "ok"]]' in out
    for d in encoder_dirs(repo):
        man = json.loads((d / PLAN_MANIFEST).read_text())
        assert (man["tensorrt"], man["gpu"], man["compute_capability"]) == ("11.4.0.fake", "NVIDIA H200", "9.0")
        assert man["strongly_typed"] and "--stronglyTyped" in man["trtexec"]
        assert (d / PLAN).is_file()
    assert (repo / TIMING_CACHE).is_file()


def test_engines_refuse_an_onnx_the_gate_did_not_accept_and_remove_plans_that_fail(fp16_repo, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(fp16_repo, repo)
    d = repo / "q_32_encoder"
    model = d / "model.onnx"
    data = model.read_bytes()
    model.unlink()  # break the hard link before editing
    model.write_bytes(data + b" ")
    p = run_on_gpu_host(f"""
        from plan_runner import OrtPlanRunner
        from embtrt.errors import EmbtrtError
        from embtrt.export.onnx2trt import build_engines
        try:
            build_engines({str(repo)!r}, runner_cls=OrtPlanRunner, log=print)
        except EmbtrtError as e:
            print("error:", e.message)
        """, tmp_path)
    assert "error: q_32_encoder: model.onnx is not the file the quality gate accepted (sha256 differs)" in p.stdout, p.stderr
    model.write_bytes(data)
    p = run_on_gpu_host(f"""
        from plan_runner import OrtPlanRunner
        from embtrt.errors import EmbtrtError
        from embtrt.export.onnx2trt import build_engines
        OrtPlanRunner.noise = 0.05
        try:
            build_engines({str(repo)!r}, runner_cls=OrtPlanRunner, log=print)
        except EmbtrtError as e:
            print("error:", e.message, "|", e.hint)
        """, tmp_path)
    assert "[x] q_32_encoder: plan vs model.onnx (exact)" in p.stdout, p.stdout + p.stderr
    assert "error: q_32_encoder: the TensorRT plan fails the quality gate and was removed" in p.stdout
    assert not (d / PLAN).exists() and not (d / PLAN_MANIFEST).exists()


@pytest.mark.skipif(TRT_HERE, reason=WITHOUT_TRT)
def test_engines_cli_without_tensorrt_names_the_reason_and_the_extra(fp16_repo):
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "engines", str(fp16_repo)], capture_output=True, text=True)
    assert p.returncode == 8 and "cannot build TensorRT engines here" in p.stderr and "embtrt[tensorrt]" in p.stderr


def test_plans_are_judged_by_the_gate_the_build_recorded(fp16_repo):
    """`embtrt engines` without a gate takes the build's from embtrt.json: the default one,
    cosine p50 >= 0.9999 and p01 >= 0.999 with the neighbour checks."""
    from embtrt.repository.manifest import read_manifest

    gate = read_manifest(fp16_repo).gate
    assert gate == Gate()
    assert (gate.cosine_p50, gate.cosine_p01, gate.top10_overlap, gate.recall_regression) == (0.9999, 0.999, 0.98, 0.005)
