"""A build with --overflow reject: the over-long request fails clearly, the others are served."""

import numpy as np
import pytest

from conftest import start_server
from embtrt.export import build
from embtrt.serve.client import EmbeddingClient
from embtrt.errors import ClientError
from embtrt.export.spec_options import spec_from_options

pytestmark = pytest.mark.integration


def test_reject_mode_fails_only_the_over_long_request(tiny_models, tmp_path):
    repo = tmp_path / "repo"
    build(spec_from_options(tiny_models["bert-cls"], repo, name="bert", overflow="reject"), log=lambda m: None)
    with start_server(repo, tmp_path) as srv, EmbeddingClient(srv.grpc_url, "bert") as c:
        with pytest.raises(ClientError, match="longer than the max sequence length 64 tokens"):
            c.embed(["fine", "word " * 100])
        v = c.embed(["fine", "also fine"])
        assert v.shape == (2, 32) and np.all(np.isfinite(v))


def test_verify_on_a_reject_build_leaves_out_the_texts_it_refuses_and_gates_the_rest(tiny_models, tmp_path, corpus):
    import json
    import subprocess
    import sys

    repo = tmp_path / "repo"
    build(spec_from_options(tiny_models["bert-cls"], repo, name="bert", overflow="reject"), log=lambda m: None)
    with start_server(repo, tmp_path) as srv:
        p = subprocess.run([sys.executable, "-m", "embtrt.cli", "verify", "--url", srv.grpc_url, "--model", "bert",
                            "--reference", str(tiny_models["bert-cls"]), "--json"], capture_output=True, text=True,
                           timeout=600)
    assert "texts longer than 64 tokens left out: bert was built with --overflow reject" in p.stderr, p.stderr[-2000:]
    assert "INTERNAL" not in p.stdout + p.stderr and "Traceback" not in p.stderr
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["passed"] and doc["gate"], doc   # the texts it gates are served right
