"""#73: probe, embed and verify ask the server which models it serves instead of assuming the bundled
model's name; verify refuses another model's weights before computing any reference. One real
tritonserver on 127.0.0.1 serving a tiny model (not the bundled one), then two models."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import start_server
from embtrt.serve.client import EmbeddingClient

pytestmark = pytest.mark.integration


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "embtrt.cli", *args], capture_output=True, text=True, timeout=300)


def test_probe_embed_and_verify_find_the_served_model_by_themselves(tiny_repos, tmp_path):
    with start_server(tiny_repos["bert-cls"], tmp_path) as srv:
        p = _cli("probe", "--url", srv.grpc_url, "--json")
        doc = json.loads(p.stdout)
        assert p.returncode == 0 and doc["ok"], p.stdout + p.stderr
        assert "bert_cls" in doc["checked"] and "bert_cls_32" in doc["checked"], doc
        e = _cli("embed", "--url", srv.grpc_url, "--json", "a cat sat on the mat", "stock markets fell")
        assert e.returncode == 0, e.stderr
        got = json.loads(e.stdout)
        assert got["model"] == "bert_cls"
        with EmbeddingClient(srv.grpc_url, "bert_cls") as c:
            want = c.embed(["a cat sat on the mat", "stock markets fell"])
        np.testing.assert_allclose(np.array(got["embeddings"]), want, atol=1e-6)
        v = _cli("verify", "--url", srv.grpc_url)
        out = " ".join((v.stdout + v.stderr).split())
        assert v.returncode != 0 and "bert_cls at" in out and "was built from other weights (embtrt.model bert-cls" in out, out
        assert "pass --reference FOLDER" in out and "reference:" not in out, out   # refused before the reference ran


def test_with_two_models_embed_asks_which_and_probe_checks_both(tiny_repos, tmp_path):
    with start_server(tiny_repos["bert-cls"], tmp_path, tiny_repos["xlmr-mean"]) as srv:
        e = _cli("embed", "--url", srv.grpc_url, "hello")
        out = " ".join((e.stdout + e.stderr).split())
        assert e.returncode != 0 and "serves several models (bert_cls, xlmr_mean)" in out and "--model NAME" in out, out
        p = _cli("probe", "--url", srv.grpc_url, "--json", "--no-expand")
        doc = json.loads(p.stdout)
        assert p.returncode == 0 and {"bert_cls", "xlmr_mean"} <= set(doc["checked"]), doc
