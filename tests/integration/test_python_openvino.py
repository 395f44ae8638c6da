"""The python-openvino target: fp32 (any CPU) and bf16 (AMX / AVX-512 bf16) pass the quality gate,
serve the reference's vectors through a two-instance front door, and pass `embtrt verify`."""

import json

import numpy as np
import pytest

from conftest import start_server
from embtrt.export import build
from embtrt.serve.client import EmbeddingClient
from embtrt.reference.parity import cosine_rows
from embtrt.reference.torch_ref import st_embed
from embtrt.repository.budget import RUN_OVERHEAD_TOKENS
from embtrt.export.spec import Gate
from embtrt.export.spec_options import spec_from_options
from embtrt.kinds.embedder.measure import Reference, verify

pytestmark = pytest.mark.integration
ov = pytest.importorskip("openvino")


@pytest.mark.slow   # a MiniLM build and a two-instance OpenVINO server for it: make test-all (make test's 10 minutes)
def test_fp32_serves_equal_vectors_and_passes_verify(ov_server, minilm_path, corpus):
    m = json.loads((ov_server.repository / "embtrt.json").read_text())
    assert m["parity"]["passed"] and m["identity"]["embtrt.backend_profile"].startswith("python-openvino:cpu:fp32:")
    front = (ov_server.repository / "minilm_ov" / "config.pbtxt").read_text()
    assert "count: 2" in front and '"openvino"' in front
    with EmbeddingClient(ov_server.grpc_url, "minilm_ov") as c:
        got = c.embed(corpus[:150])
    assert cosine_rows(st_embed(minilm_path, corpus)[:150], got).min() >= 0.9999   # the corpus' cached reference
    report = verify(ov_server.grpc_url, "minilm_ov", Reference(minilm_path), corpus, Gate(), log=lambda m: None)
    assert report.passed, report.gate.failures


@pytest.mark.slow  # a second MiniLM build on this target; make test-all
def test_bf16_build_serves_equal_vectors_and_passes_verify(tmp_path, minilm_path, corpus):
    caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    if "BF16" not in caps:
        pytest.skip(f"OpenVINO reports no bf16 on this CPU (capabilities: {', '.join(caps)}); the build refuses bf16 here")
    precision = "bf16"
    repo = tmp_path / "repo"
    lines: list[str] = []
    half = tmp_path / "half.json"   # every other corpus text, every length: the gate in full on fewer texts
    half.write_text(json.dumps(corpus[::2]))
    res = build(spec_from_options(None, repo, target="python-openvino", precision=precision), corpus=half, log=lines.append)
    m = res.manifest
    assert m["parity"]["passed"]
    assert all(b["p50"] >= 0.9999 and b["p01"] >= 0.999 for b in m["parity"]["buckets"].values())
    assert m["identity"]["embtrt.backend_profile"].startswith(f"python-openvino:cpu:{precision}:openvino-")
    assert m["spec"]["run_overhead_tokens"] == RUN_OVERHEAD_TOKENS and not any("run overhead" in x for x in lines)
    front = (repo / "all_minilm_l6_v2" / "config.pbtxt").read_text()
    assert "count: 2" in front and '"openvino"' in front
    assert f"--run-overhead-tokens {m['spec']['run_overhead_tokens']}" in m["rebuild"]
    texts = corpus[:150]
    with start_server(repo, tmp_path) as srv:
        with EmbeddingClient(srv.grpc_url, "all_minilm_l6_v2") as c:
            got = c.embed(texts)
            one = c.embed(texts[:1])
        cos = cosine_rows(st_embed(minilm_path, texts), got)
        assert np.percentile(cos, 50) >= 0.9999 and cos.min() >= 0.999
        assert cosine_rows(one, got[:1])[0] >= 0.99999  # alone or in a batch: the same vector
        report = verify(srv.grpc_url, "all_minilm_l6_v2", Reference(minilm_path), corpus, Gate(), log=lambda m: None)
    assert report.passed, report.gate.failures
    assert json.loads((repo / "embtrt.json").read_text())["rebuild"].count("--target python-openvino") == 1
