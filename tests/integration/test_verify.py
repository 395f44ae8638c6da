"""embtrt verify against real tritonservers: correct builds pass, wrong pooling and int8 are caught."""

import json
import subprocess
import sys

import pytest

from conftest import start_server
from embtrt.export import build
from embtrt.export.spec import Gate
from embtrt.export.spec_options import spec_from_options
from embtrt.kinds.embedder.measure import Reference, verify

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broken_server(tmp_path_factory, small_corpus):
    """A tritonserver with a deliberately wrong MiniLM build: cls pooling. Its build gates the 80 texts
    of small_corpus against a cls-pooled reference (what these tests check is `verify`, not that gate)."""
    base = tmp_path_factory.mktemp("broken")
    build(spec_from_options(None, base / "cls", name="minilm_cls", pooling="cls", target="python-ort"),
          corpus=small_corpus, log=lambda m: None)
    with start_server(base / "cls", base) as srv:
        yield srv


@pytest.fixture(scope="module")
def int8_server(tmp_path_factory):
    """MiniLM with ORT int8 dynamic quantization, kept past the gate (--allow-mismatch)."""
    base = tmp_path_factory.mktemp("int8")
    build(spec_from_options(None, base / "int8", name="minilm_int8", precision="int8", target="python-ort",
                            allow_mismatch=True), log=lambda m: None)
    with start_server(base / "int8", base) as srv:
        yield srv


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "embtrt.cli", "verify", *args], capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def small_corpus(corpus, tmp_path_factory):
    """80 corpus texts (every bucket and over the longest): enough for a failing gate to show."""
    small = tmp_path_factory.mktemp("small") / "small.json"
    small.write_text(json.dumps(corpus[:80]))
    return small


def test_correct_build_passes_verify_with_a_table_and_json(minilm_server, minilm_path, small_corpus):
    p = _cli("--url", minilm_server.grpc_url, "--model", "all_minilm_l6_v2", "--reference", str(minilm_path),
             "--corpus", str(small_corpus))
    assert p.returncode == 0, p.stdout + p.stderr
    for needle in ("[ok] bucket     <=32", "[ok] bucket     over", "[ok] top-10 neighbour overlap",
                   "[ok] recall@10", "PASSED"):
        assert needle in p.stdout
    p = _cli("--url", minilm_server.grpc_url, "--json", "--corpus", str(small_corpus))
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["passed"] is True
    assert set(doc["gate"]["buckets"]) == {"<=32", "<=128", "<=256", "over"}
    assert doc["gate"]["buckets"]["<=32"]["p50"] >= 0.9999
    assert doc["identity"]["embtrt.pooling"] == "mean" and doc["warnings"] == []


def test_wrong_pooling_fails_with_a_clear_report(broken_server, minilm_path, small_corpus):
    p = _cli("--url", broken_server.grpc_url, "--model", "minilm_cls", "--reference", str(minilm_path),
             "--corpus", str(small_corpus))
    assert p.returncode == 4
    assert "[x] bucket" in p.stdout and "cosine p50" in p.stdout
    assert "FAILED" in p.stdout and "worst texts:" in p.stdout


@pytest.mark.slow  # a third MiniLM build; the build's own gate catches int8 in tests/unit/test_build.py
def test_int8_dynamic_quantization_is_caught_unless_thresholds_are_lowered(int8_server, minilm_path, corpus):
    ref = Reference(minilm_path)
    rep = verify(int8_server.grpc_url, "minilm_int8", ref, corpus, Gate(), log=lambda m: None)
    assert not rep.passed
    assert 0.85 < rep.gate.overall.p50 < 0.999  # about 0.96 seen here
    assert any("runs int8" in w for w in rep.warnings)
    lowered = Gate(cosine_p50=0.8, cosine_p01=0.5, top10_overlap=0.3, recall_regression=0.6)
    assert verify(int8_server.grpc_url, "minilm_int8", ref, corpus, lowered, log=lambda m: None).passed


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


@pytest.mark.slow   # needs ov_server (a second MiniLM deployment on python-openvino): make test-all
def test_against_gates_two_deployments_of_one_model_and_catches_two_models(minilm_server, broken_server, ov_server,
                                                                          small_corpus):
    """The cross-backend release gate: MiniLM on python-ort and on python-openvino fp32 agree; MiniLM
    against a different model (the same weights with CLS pooling) fails, naming buckets and figures,
    and the identity diff says which vectors need re-embedding."""
    ov = ov_server
    p = _cli("--url", minilm_server.grpc_url, "--model", "all_minilm_l6_v2",
             "--against", f"{ov.grpc_url}/minilm_ov", "--json", "--corpus", str(small_corpus))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["passed"] and doc["reference"] == f"minilm_ov@{ov.grpc_url}"
    assert all(b["p50"] >= 0.9999 for b in doc["gate"]["buckets"].values())
    assert any("embtrt.backend_profile" in w for w in doc["warnings"])
    assert any("same model on different backends" in w for w in doc["warnings"])
    p = _cli("--url", minilm_server.grpc_url, "--model", "all_minilm_l6_v2",
             "--against", f"{broken_server.grpc_url}/minilm_cls", "--corpus", str(small_corpus))
    assert p.returncode == 4, p.stdout[-3000:] + p.stderr[-2000:]
    assert "[x] bucket" in p.stdout and "cosine p50" in p.stdout and "FAILED" in p.stdout
    assert "embtrt.pooling: all_minilm_l6_v2@" in p.stdout and "re-embed the index" in p.stdout
