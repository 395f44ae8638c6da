"""The python-torch target: bf16 autocast passes the quality gate and serves the reference's vectors."""

import json

import numpy as np
import pytest

from conftest import start_server
from embtrt.export import build
from embtrt.serve.client import EmbeddingClient
from embtrt.reference.parity import cosine_rows
from embtrt.reference.torch_ref import st_embed
from embtrt.export.spec import Gate
from embtrt.export.spec_options import spec_from_options
from embtrt.kinds.embedder.measure import Reference, verify

pytestmark = pytest.mark.integration


@pytest.mark.slow  # bf16 autocast is emulated on CPUs without AVX-512 bf16 / AMX; make test-all
def test_bf16_build_passes_the_gate_and_serves_equal_vectors(tmp_path, minilm_path, corpus):
    repo = tmp_path / "repo"
    half = tmp_path / "half.json"   # every other corpus text, every length: the gate in full on fewer texts
    half.write_text(json.dumps(corpus[::2]))
    res = build(spec_from_options(None, repo, target="python-torch", precision="bf16"), corpus=half, log=lambda m: None)
    m = res.manifest
    assert m["parity"]["passed"] and m["onnx"] is None
    assert m["identity"]["embtrt.backend_profile"].startswith("python-torch:cpu:bf16:torch-")
    assert all(b["p50"] >= 0.9999 for b in m["parity"]["buckets"].values())
    assert (repo / "all_minilm_l6_v2" / "1" / "hf" / "model.safetensors").is_file()
    cfg = (repo / "all_minilm_l6_v2_32_encoder" / "config.pbtxt").read_text()
    assert "PyTorch (bf16)" in cfg and '"runtime"' in cfg
    texts = corpus[:120]
    with start_server(repo, tmp_path) as srv:
        with EmbeddingClient(srv.grpc_url, "all_minilm_l6_v2") as c:
            got = c.embed(texts)
            ident = c.metadata().identity
        # every other corpus text (every length): bf16 runs emulated on CPUs without AVX-512 bf16 / AMX
        report = verify(srv.grpc_url, "all_minilm_l6_v2", Reference(minilm_path), corpus[::2], Gate(), log=lambda m: None)
    assert report.passed, report.gate.failures
    cos = cosine_rows(st_embed(minilm_path, texts), got)
    assert np.percentile(cos, 50) >= 0.9999 and np.percentile(cos, 1) >= 0.999
    assert ident["embtrt.precision"] == "bf16"
    assert json.loads((repo / "embtrt.json").read_text())["rebuild"].count("--target python-torch") == 1


def test_python_torch_refuses_precisions_it_cannot_run(tmp_path):
    from embtrt.errors import SpecError

    with pytest.raises(SpecError, match="python-torch"):
        spec_from_options(None, tmp_path / "x", target="python-torch", precision="int8")
