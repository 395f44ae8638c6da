"""embtrt verify against real tritonservers: correct builds pass, wrong pooling and int8 are caught."""

import json
import subprocess
import sys

import pytest

from conftest import start_server
from embtrt.build import build
from embtrt.build.spec import Gate, spec_from_options
from embtrt.measure.verify import Reference, verify

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broken_server(tmp_path_factory):
    """One tritonserver with two deliberately wrong MiniLM builds: cls pooling, and int8 dynamic."""
    base = tmp_path_factory.mktemp("broken")
    quiet = lambda m: None  # noqa: E731
    build(spec_from_options(None, base / "cls", name="minilm_cls", pooling="cls", target="python-ort"), log=quiet)
    build(spec_from_options(None, base / "int8", name="minilm_int8", precision="int8", target="python-ort",
                            allow_mismatch=True), log=quiet)
    srv = start_server(base / "cls", base)
    srv.spec = srv.spec.__class__(**{**srv.spec.__dict__, "extra_args": (f"--model-repository={base / 'int8'}",)})
    with srv:
        yield srv


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "embtrt.cli", "verify", *args], capture_output=True, text=True,
                          timeout=600)


def test_correct_build_passes_verify_with_a_table_and_json(minilm_server, minilm_path, corpus, tmp_path):
    p = _cli("--url", minilm_server.grpc_url, "--model", "all_minilm_l6_v2", "--reference", str(minilm_path))
    assert p.returncode == 0, p.stdout + p.stderr
    for needle in ("[ok] bucket     <=32", "[ok] bucket     over", "[ok] top-10 neighbour overlap",
                   "[ok] recall@10", "PASSED"):
        assert needle in p.stdout
    small = tmp_path / "small.json"
    small.write_text(json.dumps(corpus[:80]))
    p = _cli("--url", minilm_server.grpc_url, "--json", "--corpus", str(small))
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["passed"] is True
    assert set(doc["gate"]["buckets"]) == {"<=32", "<=128", "<=256", "over"}
    assert doc["gate"]["buckets"]["<=32"]["p50"] >= 0.9999
    assert doc["identity"]["embtrt.pooling"] == "mean" and doc["warnings"] == []


def test_wrong_pooling_fails_with_a_clear_report(broken_server, minilm_path):
    p = _cli("--url", broken_server.grpc_url, "--model", "minilm_cls", "--reference", str(minilm_path))
    assert p.returncode == 4
    assert "[x] bucket" in p.stdout and "cosine p50" in p.stdout
    assert "FAILED" in p.stdout and "worst texts:" in p.stdout


def test_int8_dynamic_quantization_is_caught_unless_thresholds_are_lowered(broken_server, minilm_path, corpus):
    ref = Reference(minilm_path)
    rep = verify(broken_server.grpc_url, "minilm_int8", ref, corpus, Gate(), log=lambda m: None)
    assert not rep.passed
    assert 0.85 < rep.gate.overall.p50 < 0.999  # about 0.96 seen here
    assert any("runs int8" in w for w in rep.warnings)
    lowered = Gate(cosine_p50=0.8, cosine_p01=0.5, top10_overlap=0.3, recall_regression=0.6)
    assert verify(broken_server.grpc_url, "minilm_int8", ref, corpus, lowered, log=lambda m: None).passed


def test_under_load_every_vector_equals_its_unloaded_value(minilm_server, minilm_path, corpus):
    rep = verify(minilm_server.grpc_url, "all_minilm_l6_v2", Reference(minilm_path), corpus, Gate(),
                 under_load=True, concurrency=64, log=lambda m: None)
    assert rep.load is not None
    assert rep.load.errors == 0 and rep.load.lost_rows == 0
    assert rep.load.cosine_min >= 0.999 and rep.load.requests > 64
    assert rep.passed


def test_identity_mismatch_with_the_index_is_warned(minilm_server, minilm_repo, minilm_path, corpus):
    manifest = json.loads((minilm_repo / "embtrt.json").read_text())
    index = dict(manifest["identity"], **{"embtrt.backend_profile": "tensorrt:gpu:fp16"})
    rep = verify(minilm_server.grpc_url, "all_minilm_l6_v2", Reference(minilm_path), corpus[:50], Gate(),
                 index_identity=index, log=lambda m: None)
    assert any("embtrt.backend_profile" in w for w in rep.warnings)
