"""`pip install embtrt` without extras: no PyTorch, and every serving-side command works.

The wheel is built from this checkout and installed into a fresh venv from the package index
(the same index `make install` uses). From that venv: check, k8s, probe, embed, engines --check
and the gateway (serving real requests from the session's tritonserver, driven by the openai
client) work; build fails at once with the hint naming embtrt[build]. The venv's size goes into
the test log (the README records it).
"""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from embtrt.reference.parity import cosine_rows
from embtrt.serve.server import free_port

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NAME = "all_minilm_l6_v2"
HEAVY = ("torch", "transformers", "sentence-transformers", "sentence_transformers", "onnx", "onnxruntime",
         "scipy", "scikit-learn", "nvidia-modelopt")


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 600), **kw)


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("base")
    p = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(ROOT)])
    assert p.returncode == 0, p.stderr[-3000:]
    wheel = next((tmp / "dist").glob("embtrt-*.whl"))
    venv = tmp / "venv"
    # no pip of its own and no bytecode compiled at install: this environment's pip installs into it
    # (`pip --python`), 7 s instead of 20 here; what gets installed is the same
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
    p = _pip(venv, "install", "-q", "--no-compile", str(wheel))
    assert p.returncode == 0, p.stderr[-3000:]
    return venv


def _pip(venv: Path, *args: str) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check",
                 *args])


def _embtrt(venv: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return _run([str(venv / "bin" / "embtrt"), *args], env=env, **kw)


def test_base_install_has_no_pytorch_and_serves_checks_and_scales(base_venv, minilm_repo, minilm_server, tmp_path,
                                                                    corpus, minilm_path):
    pip = _pip(base_venv, "list", "--format", "json")
    names = {d["name"].lower() for d in json.loads(pip.stdout)}
    assert "embtrt" in names
    assert not names & set(HEAVY), names & set(HEAVY)
    assert not [n for n in names if n.startswith("nvidia-")]
    size_mb = sum(f.stat().st_size for f in base_venv.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20
    print(f"base venv: {len(names)} distributions, {size_mb:.0f} MB (no pip, no bytecode)")

    p = _embtrt(base_venv, "check", str(minilm_repo))
    assert p.returncode == 0 and "[x]" not in p.stdout, p.stdout + p.stderr
    # the default pool image (tritonserver 25.06, Python 3.12) refuses this machine's bundle; a pool image of its Python
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    p = _embtrt(base_venv, "k8s", str(minilm_repo), "--out", str(tmp_path / "k8s"))
    assert p.returncode == 2 and "--server-python 3.12" in p.stderr, p.stdout + p.stderr
    p = _embtrt(base_venv, "k8s", str(minilm_repo), "--out", str(tmp_path / "k8s"), "--image", "localhost/pool:standin",
                "--server-python", py)
    assert p.returncode == 0 and (tmp_path / "k8s" / "kustomization.yaml").is_file(), p.stdout + p.stderr
    p = _embtrt(base_venv, "probe", "--url", minilm_server.grpc_url, "--model", NAME, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["ok"], p.stdout + p.stderr
    p = _embtrt(base_venv, "embed", corpus[0], "--url", minilm_server.grpc_url, "--model", NAME, "--json")
    assert p.returncode == 0, p.stderr
    from embtrt.reference.torch_ref import st_embed

    ref = st_embed(minilm_path, corpus)[:40]   # the corpus' reference, computed once per run (reference cache)
    assert cosine_rows(ref[:1], np.asarray(json.loads(p.stdout)["embeddings"]))[0] >= 0.9999

    # PyTorch-side commands fail at once with the extra to install, not a traceback
    p = _embtrt(base_venv, "build", "--out", str(tmp_path / "nope"))
    assert p.returncode == 8 and "Traceback" not in p.stderr, p.stderr
    assert "error:" in p.stderr and "pip install 'embtrt[build]'" in p.stderr
    assert not (tmp_path / "nope").exists()
    p = _embtrt(base_venv, "verify", "--url", minilm_server.grpc_url)
    assert p.returncode == 8 and "embtrt[build]" in p.stderr and "Traceback" not in p.stderr

    # the gateway, in the base venv, in front of the session's server; the official openai client
    port = free_port()
    log = tmp_path / "gw.log"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with open(log, "wb") as fh:
        gw = subprocess.Popen([str(base_venv / "bin" / "embtrt"), "gateway", str(minilm_repo), "--triton",
                               minilm_server.grpc_url, "--port", str(port)], stdout=fh, stderr=subprocess.STDOUT,
                              env=env, start_new_session=True)
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=2)
                break
            except OSError:
                assert gw.poll() is None and time.time() < deadline, log.read_text()[-2000:]
                time.sleep(0.3)
        from openai import OpenAI

        c = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        r = c.embeddings.create(model=NAME, input=corpus[:40], encoding_format="float")
        got = np.asarray([d.embedding for d in r.data], dtype=np.float32)
        assert cosine_rows(ref, got).min() >= 0.9999
    finally:
        gw.terminate()
        gw.wait(10)


def test_base_install_checks_tensorrt_plans_without_tensorrt(base_venv, tiny_models, tmp_path):
    """`embtrt engines --check` (what an init container runs first) needs neither TensorRT nor
    PyTorch: it reports the plans still to build, and exits 1 while any is missing."""
    from embtrt.export import build
    from embtrt.export.spec_options import spec_from_options

    repo = tmp_path / "trt"
    build(spec_from_options(tiny_models["bert-cls"], repo, name="bert", target="tensorrt", buckets="16,64",
                            max_seq_length=64), log=lambda m: None)
    p = _embtrt(base_venv, "engines", str(repo), "--check")
    assert p.returncode == 1 and "[missing] bert_16_encoder" in p.stdout, p.stdout + p.stderr
    p = _embtrt(base_venv, "engines", str(repo))  # building needs the tensorrt extra: said at once
    assert p.returncode == 8 and "embtrt[tensorrt]" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_tensorrt_extra_resolves_without_pytorch(tmp_path):
    """The GPU host's extra: everything it resolves, torch nowhere. The `tensorrt` metapackage itself
    is an sdist that fetches its libraries from NVIDIA's index while pip prepares it, which this
    machine cannot reach; it is resolved by name (its requirements are NVIDIA's tensorrt-cu* wheels)
    and every other requirement of the extra is resolved for real."""
    import tomllib

    names = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["tensorrt"]
    assert any(n.startswith("tensorrt") for n in names)
    assert not [n for n in names if n.split(">")[0].split("=")[0] in ("torch", "nvidia-modelopt")]
    rest = [n for n in names if not n.startswith("tensorrt")]
    report = tmp_path / "report.json"
    p = _run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q", "--report", str(report),
              *rest])
    assert p.returncode == 0, p.stderr[-2000:]
    resolved = {i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]}
    assert "polygraphy" in resolved and "onnxruntime" in resolved
    assert "torch" not in resolved and not [n for n in resolved if n.startswith("nvidia-cu")]
