"""A repository loads on a tritonserver whose Python has numpy only, as NVIDIA's stock images do.

The bundled tritonserver runs its Python-backend stubs with the first `python3` on PATH; here
that is a fresh virtual environment holding numpy (< 2, as the Triton 2.51 Python backend of
that server needs: with numpy 2 its BYTES deserialization fails) and nothing else, with none
of embtrt's packages on PYTHONPATH. The repository must bring everything else itself.
"""

import json
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from embtrt.export import build
from embtrt.repository.check import check_repository
from embtrt.errors import ServerError
from embtrt.export.spec_options import spec_from_options

pytestmark = pytest.mark.integration
RUNNING = f"{sys.version_info.major}.{sys.version_info.minor}"
OTHER = "3.12" if RUNNING != "3.12" else "3.11"


@pytest.fixture(scope="module")
def numpy_only_python(tmp_path_factory) -> Path:
    env = tmp_path_factory.mktemp("stock") / "py"
    venv.EnvBuilder(with_pip=True).create(env)
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "numpy<2"], check=True)
    listed = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "list", "--format=json"],
                            capture_output=True, text=True, check=True).stdout
    assert {p["name"].lower() for p in json.loads(listed)} <= {"numpy", "pip", "setuptools"}
    return env


def _server(repo: Path, tmp_path: Path, python_env: Path, stock: bool = False):
    """embtrt's launcher; `stock`: with Triton's config auto-complete left on, as a plain `tritonserver
    --model-repository` runs (embtrt's own launcher turns it off: its configs are complete)."""
    from embtrt.serve.server import ServerSpec, TritonServer, free_port

    return TritonServer(ServerSpec(repo, grpc_port=free_port(), http_port=free_port(), metrics_port=free_port(),
                                   log_file=tmp_path / "tritonserver.log", startup_timeout_s=120, python_env=python_env,
                                   graceful_exit=False, auto_complete=stock))


def _auto_complete(log: Path) -> set[str]:
    """What the Python backend says of config auto-complete in its start-up table (one entry per load)."""
    return set(re.findall(r'"auto-complete-config":"(true|false)"', log.read_text()))


def test_bundled_repository_serves_real_text_equal_to_sentence_transformers_on_a_numpy_only_python(
        minilm_repo, numpy_only_python, corpus, minilm_path, tmp_path):
    from embtrt.serve.client import EmbeddingClient
    from embtrt.reference.parity import cosine_rows
    from embtrt.reference.torch_ref import st_embed

    m = json.loads((minilm_repo / "embtrt.json").read_text())
    assert m["bundle"]["python"] == RUNNING and set(m["bundle"]["packages"]) == {"tokenizers", "onnxruntime"}
    assert (minilm_repo / m["bundle"]["path"] / "tokenizers").is_dir()
    texts = corpus[::3]  # every length bucket, over-long texts included
    with _server(minilm_repo, tmp_path, numpy_only_python, stock=True) as srv:
        import tritonclient.grpc as grpcclient

        # each front-door instance ran its warm-up text before the server was ready (Triton counts them)
        with grpcclient.InferenceServerClient(srv.grpc_url) as tc:
            stats = tc.get_inference_statistics("all_minilm_l6_v2", as_json=True)["model_stats"][0]
            instances = tc.get_model_config("all_minilm_l6_v2").config.instance_group[0].count
        assert int(stats["inference_stats"]["success"].get("count", 0)) == instances == 2, stats
        with EmbeddingClient(srv.grpc_url, "all_minilm_l6_v2") as c:
            got = c.embed(texts)
        with EmbeddingClient(srv.grpc_url, "all_minilm_l6_v2_128") as c:
            short = [t for t in texts if len(t) < 200][:20]
            got_bucket = c.embed(short)
    ref = st_embed(minilm_path, texts)
    cos = cosine_rows(ref, got)
    assert cos.min() >= 0.9999, float(cos.min())
    assert cosine_rows(st_embed(minilm_path, short), got_bucket).min() >= 0.9999
    assert "No module named" not in (tmp_path / "tritonserver.log").read_text()
    assert _auto_complete(tmp_path / "tritonserver.log") == {"true"}   # as the stock command line runs it


def test_repository_without_the_bundle_fails_to_load_with_the_clear_message(tiny_models, numpy_only_python, tmp_path):
    repo = tmp_path / "nobundle"
    res = build(spec_from_options(tiny_models["bert-cls"], repo, name="bert", bundle_deps=False), log=lambda m: None)
    assert res.manifest["bundle"] is None and check_repository(repo).passed
    with pytest.raises(ServerError):
        with _server(repo, tmp_path, numpy_only_python):
            pass
    log = (tmp_path / "tritonserver.log").read_text()
    assert "this model needs the Python package(s) tokenizers" in log
    assert "the repository was built with --no-bundle-deps" in log
    # embtrt's launcher: no auto-complete stub, the message comes from the instance's own start
    assert _auto_complete(tmp_path / "tritonserver.log") == {"false"}


def test_bundle_for_another_python_is_flagged_by_check_and_refused_at_load(tiny_models, numpy_only_python, tmp_path):
    repo = tmp_path / "other"
    build(spec_from_options(tiny_models["bert-cls"], repo, name="bert", server_python=OTHER), log=lambda m: None)
    m = json.loads((repo / "embtrt.json").read_text())
    assert m["bundle"]["python"] == OTHER and m["bundle"]["path"] == f"bert/_deps/cp{OTHER.replace('.', '')}"
    assert check_repository(repo).passed  # consistent in itself
    rep = check_repository(repo, server_python=RUNNING)
    assert f"bundle: built for Python {OTHER}, but the server runs Python {RUNNING}: rebuild with --server-python {RUNNING}" \
        in rep.failures()
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "check", str(repo), "--server-python", RUNNING],
                       capture_output=True, text=True)
    assert p.returncode == 5 and f"built for Python {OTHER}" in p.stdout
    # a bundle whose modules are for another Python than its record says is flagged too
    doc = json.loads((repo / "embtrt.json").read_text())
    doc["bundle"]["python"] = RUNNING
    (repo / "embtrt.json").write_text(json.dumps(doc))
    assert any(f.startswith(f"bundle: recorded for Python {RUNNING} but holds modules built for cp{OTHER.replace('.', '')}")
               for f in check_repository(repo).failures())
    doc["bundle"]["python"] = OTHER
    (repo / "embtrt.json").write_text(json.dumps(doc))
    with pytest.raises(ServerError):
        with _server(repo, tmp_path, numpy_only_python):
            pass
    log = (tmp_path / "tritonserver.log").read_text()
    assert f"this repository's Python packages were bundled for Python {OTHER}" in log
    assert f"this Triton Python backend runs Python {RUNNING}" in log and f"--server-python {RUNNING}" in log


def test_bundle_is_only_what_the_target_imports(tiny_repos):
    for key, repo in tiny_repos.items():
        m = json.loads((repo / "embtrt.json").read_text())
        assert set(m["bundle"]["packages"]) == {"tokenizers", "onnxruntime"}, key
        deps = json.loads((repo / f"{m['name']}_32_tokenizer" / "1" / "embtrt_deps.json").read_text())
        assert deps["requires"] == ["tokenizers"] and deps["bundle"]["python"] == RUNNING
        assert 10 << 20 < m["bundle"]["size_bytes"] < 200 << 20
