"""Several models on one tritonserver and behind one gateway: one repository per model, served
together (`embtrt serve A B`, the same tritonserver's several --model-repository), checked together
(`embtrt check A B`), each model equal to its own sentence-transformers reference; and one model on
two targets side by side, gated against each other with `verify --against`."""

import json
import subprocess
import sys

import numpy as np
import pytest

from embtrt.reference.torch_ref import st_embed
from embtrt.serve.client import EmbeddingClient
from embtrt.serve.server import ServerSpec, TritonServer, free_port
from parity_helpers import assert_discriminating, assert_rows_equal

pytestmark = pytest.mark.integration


def _server(repos, tmp_path):
    return TritonServer(ServerSpec(repos[0], more_repositories=tuple(repos[1:]), grpc_port=free_port(),
                                   http_port=free_port(), metrics_port=free_port(), log_file=tmp_path / "triton.log",
                                   graceful_exit=False))


def _check(*repos):
    return subprocess.run([sys.executable, "-m", "embtrt.cli", "check", *map(str, repos)], capture_output=True, text=True)


def test_two_models_on_one_tritonserver_and_one_gateway(tiny_models, tiny_repos, corpus, tmp_path):
    from openai import OpenAI
    from test_gateway import gateway

    a, b = tiny_repos["bert-cls"], tiny_repos["xlmr-mean"]
    p = _check(a, b)
    assert p.returncode == 0 and "can be served by one tritonserver" in p.stdout, p.stdout + p.stderr
    p = _check(a, a)  # the same names twice
    assert p.returncode == 5 and "model 'bert_cls' is in both" in p.stdout
    texts = corpus[::10][:30]
    for key in ("bert-cls", "xlmr-mean"):   # they tell texts apart: the row checks below can fail
        assert_discriminating(tiny_models[key], texts)
    with _server([a, b], tmp_path) as srv:
        for name, key in (("bert_cls", "bert-cls"), ("xlmr_mean", "xlmr-mean")):
            with EmbeddingClient(srv.grpc_url, name) as c:
                got = c.embed(texts)
            assert_rows_equal(st_embed(tiny_models[key], texts), got, what=name)
        with gateway(a, tmp_path / "gw.log", str(b), "--triton", srv.grpc_url) as url:
            client = OpenAI(base_url=url + "/v1", api_key="unused")
            listed = {m.id: m.model_extra["embtrt"] for m in client.models.list().data}
            assert set(listed) == {"bert_cls", "xlmr_mean"}
            assert listed["xlmr_mean"]["embtrt.model_sha256"] != listed["bert_cls"]["embtrt.model_sha256"]
            for name, key in (("bert_cls", "bert-cls"), ("xlmr_mean", "xlmr-mean")):
                r = client.embeddings.create(model=name, input=texts, encoding_format="float")
                got = np.asarray([d.embedding for d in r.data], dtype=np.float32)
                assert_rows_equal(st_embed(tiny_models[key], texts), got, what=f"gateway {name}")
    with pytest.raises(Exception, match="model 'bert_cls' is in both"):
        _server([a, a], tmp_path).start()


@pytest.mark.slow  # verify --against in the default run: test_verify.py
def test_one_model_on_two_targets_side_by_side_passes_verify_against(minilm_repo, ov_server, tmp_path):
    """MiniLM on python-ort and on python-openvino fp32 in one tritonserver: the cross-backend gate
    between the two models of that server passes, and the identities differ only in backend."""
    from embtrt.common.corpus import load_corpus

    (tmp_path / "corpus.json").write_text(json.dumps(load_corpus()[::3]))   # every length, a third of the texts
    with _server([minilm_repo, ov_server.repository], tmp_path) as srv:
        p = subprocess.run([sys.executable, "-m", "embtrt.cli", "verify", "--url", srv.grpc_url, "--model",
                            "all_minilm_l6_v2", "--against", f"{srv.grpc_url}/minilm_ov", "--json",
                            "--corpus", str(tmp_path / "corpus.json")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["passed"] and all(b["p01"] >= 0.999 for b in doc["gate"]["buckets"].values())
    assert not any("different models" in w for w in doc["warnings"])


def test_probe_checks_each_model_of_a_server_on_its_own(tiny_repos, tmp_path):
    a, b = tiny_repos["bert-cls"], tiny_repos["xlmr-mean"]
    with _server([a, b], tmp_path) as srv:
        p = subprocess.run([sys.executable, "-m", "embtrt.cli", "probe", "--url", srv.grpc_url, "--model", "bert_cls",
                            "--model", "xlmr_mean", "--json"], capture_output=True, text=True)
        doc = json.loads(p.stdout)
        assert p.returncode == 0 and doc["ok"], doc
        assert {"bert_cls", "xlmr_mean", "bert_cls_32", "xlmr_mean_32"} <= set(doc["checked"])
        # a length pool's own ensembles of one model are still compared with each other
        p = subprocess.run([sys.executable, "-m", "embtrt.cli", "probe", "--url", srv.grpc_url, "--no-expand",
                            "--model", "xlmr_mean_32", "--model", "xlmr_mean_128", "--json"], capture_output=True, text=True)
        assert p.returncode == 0 and json.loads(p.stdout)["checked"] == ["xlmr_mean_32", "xlmr_mean_128"]
