"""`embtrt matrix` on the tiny 16K-token model against a real tritonserver: token budgets
reloaded through the repository API, band x concurrency cells with memory, errors and the cosine
of every vector against the text embedded alone; and the preemption case: a ~16K-token text sent
through the front door and through the 16384 bucket while concurrency-64 short-text load runs."""

import json
import subprocess
import sys

import pytest

from embtrt.export import build
from embtrt.export.spec_options import spec_from_options
from embtrt.measure.matrix import COSINE_MIN, MatrixSpec, band_texts, error_kind, run_matrix

# the whole module is slow (a 16K-token model built and served, two matrices: ~4 min on 2 cores):
# make test-all
pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def repo16k(tmp_path_factory):
    from tiny_models import make_bert_16k

    base = tmp_path_factory.mktemp("m16k")
    model = make_bert_16k(base / "b16k")
    out = base / "repo"
    build(spec_from_options(model, out), log=lambda m: None)  # buckets 32 .. 16384, budget 16384
    return out


def test_small_matrix_counts_add_up_with_memory_and_cosine_in_every_cell(repo16k, tmp_path):
    logs: list[str] = []
    spec = MatrixSpec(repo16k, budgets=(4096, 8192), concurrency=(1, 4), bands=(32, 2048), requests=8, texts=4,
                      preempt=False, pools=True, out=tmp_path / "m")
    doc = run_matrix(spec, log=logs.append)
    # the budgets were really loaded: the server reported each bucket encoder's max batch after the reload
    assert doc["server_max_batch"]["4096"]["2048"] == 2 and doc["server_max_batch"]["8192"]["2048"] == 4
    assert doc["server_max_batch"]["4096"]["512"] == 8 and doc["server_max_batch"]["8192"]["512"] == 16
    assert doc["server_max_batch"]["8192"]["32"] == 32 and doc["server_max_batch"]["8192"]["16384"] == 1
    bands = [c for c in doc["cells"] if c["kind"] == "band"]
    assert sorted((c["budget"], c["band"], c["concurrency"]) for c in bands) == sorted(
        (b, f"<={L}", k) for b in (4096, 8192) for L in (32, 2048) for k in (1, 4))
    assert doc["bands"]["<=32"]["tokens"][1] <= 32 and 512 < doc["bands"]["<=2048"]["tokens"][0] <= 2048
    for c in doc["cells"]:
        assert c["sent"] == c["ok"] + c["errors"], c
        # a band cell sends --requests; beside long requests, short ones run until two long ones are done
        assert c["sent"] == 8 if c["kind"] == "band" else c["sent"] >= 8, c
        assert sum(c["error_kinds"].values()) == c["errors"]
        assert c["peak_rss_mib"] > 100  # the server tree, sampled during the cell
        assert c["cos_min"] >= COSINE_MIN and c["cos_p01"] >= c["cos_min"]
        assert c["p50_ms"] <= c["p95_ms"] <= c["p99_ms"]
    pools = [c for c in doc["cells"] if c["kind"] == "pools"]  # the 2048 bucket on a second server, and not
    assert sorted(c["band"] for c in pools) == sorted(["<=32 with <=2048, one server", "<=32 with <=2048, two servers"] * 2)
    assert all(c["extra"]["long"]["ok"] > 0 and c["extra"]["long"]["cos_min"] >= COSINE_MIN for c in pools)
    assert all(c["extra"]["pool_peak_rss_mib"] > 100 for c in pools)
    mixed = [c for c in doc["cells"] if c["kind"] == "mixed"]
    assert len(mixed) == 4 and all(c["extra"].get("long", {}).get("cos_min", 1.0) >= COSINE_MIN for c in mixed if c["extra"])
    names = sorted(p.name for p in (tmp_path / "m").iterdir())
    assert names[:2] == ["matrix.json", "matrix.md"]
    md = (tmp_path / "m" / "matrix.md").read_text()
    assert "## max_batch_tokens 4096" in md and "## max_batch_tokens 8192" in md
    # the server went back to the repository's own budget afterwards (it was ours: stopped now); the
    # repository on disk is untouched
    man = json.loads((repo16k / "embtrt.json").read_text())
    assert man["max_batch_tokens"] == 16384 and man["bucket_max_batch"]["2048"] == 8


def test_a_long_text_under_concurrency_64_load_gives_its_unloaded_vector(repo16k):
    """The preemption cell: a text of max length - 300 tokens, through the front door and through
    the 16384 bucket's ensemble, while 64 concurrent short requests run."""
    spec = MatrixSpec(repo16k, budgets=(16384,), concurrency=(1,), bands=(32,), requests=4, texts=2,
                      preempt=True, preempt_concurrency=64, preempt_repeats=1, mixed=False)
    doc = run_matrix(spec, log=lambda m: None)
    pre = {c["band"]: c for c in doc["cells"] if c["kind"] == "preempt"}
    assert set(pre) == {"b16k", "b16k_16384"}
    assert doc["long_tokens"] > 16384 - 400
    for c in pre.values():
        assert c["sent"] == c["ok"] == 1 and c["errors"] == 0
        assert c["cos_min"] >= COSINE_MIN, c
        load = c["extra"]["load"]
        assert load["ok"] == load["sent"] > 64 and load["errors"] == 0  # the load really ran, and all of it answered
        assert load["cos_min"] >= COSINE_MIN
        assert 0 < load["p50_ms"] <= load["p99_ms"] <= load["max_ms"] and c["extra"]["passed"], load
    assert doc["preempt_passed"]


def test_band_texts_are_real_text_of_the_band_and_errors_are_classified(repo16k):
    from tokenizers import Tokenizer

    from embtrt.common.corpus import load_corpus

    tok = Tokenizer.from_file(str(repo16k / "b16k" / "1" / "tokenizer.json"))
    tok.no_truncation()
    texts = band_texts(tok, load_corpus(), 2048, 8192, 2)
    assert len(texts) == 2 and texts[0] != texts[1]
    assert all(2048 < len(tok.encode(t).ids) <= 8192 for t in texts)
    assert error_kind("[StatusCode.RESOURCE_EXHAUSTED] Exceeds maximum queue size") == "queue_full"
    assert error_kind("onnxruntime: Failed to allocate memory: out of memory") == "oom"
    assert error_kind("Deadline Exceeded") == "timeout"
    assert error_kind("something else") == "other"


def test_matrix_cli_refuses_a_band_that_is_not_a_bucket(repo16k):
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "matrix", str(repo16k), "--only", "100",
                        "--max-batch-tokens", "1024"], capture_output=True, text=True)
    assert p.returncode != 0 and "not buckets of b16k" in p.stderr, p.stderr
