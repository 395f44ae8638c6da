"""embtrt bench against a real tritonserver and a local OpenAI-compatible peer."""

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from embtrt.kinds.embedder.measure_bench import Target, length_buckets, run_bench, save
from embtrt.errors import SpecError
from embtrt.serve.server import free_port
from waiting import until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
RESULT_KEYS = {"target", "kind", "bucket", "concurrency", "texts_per_request", "sent", "ok", "errors", "seconds",
               "req_per_s", "texts_per_s", "tokens_per_s", "p50_ms", "p95_ms", "p99_ms", "max_ms", "error_samples",
               "triton", "cpu_ms_per_req", "peak_rss_mib", "client_cpu_ms_per_req"}


@pytest.fixture(scope="module")
def openai_peer():
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "openai_peer.py"), str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/embeddings", timeout=1)
            except urllib.error.HTTPError:
                break  # 405 for GET: the server is up
            except OSError:
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_length_buckets_group_by_token_count():
    g = length_buckets(np.array([5, 40, 300, 32, 129]), (32, 128, 256))
    assert {k: v.tolist() for k, v in g.items()} == {"<=32": [0, 3], "<=128": [1], "<=256": [4], ">256": [2],
                                                     "mixed": [0, 1, 2, 3, 4]}


def test_bench_side_by_side_counts_are_consistent(minilm_server, openai_peer, corpus, tmp_path):
    from embtrt.kinds.embedder.measure import Reference
    from embtrt.reference.modelinfo import default_model_path

    counts = Reference(default_model_path()).token_counts(corpus)
    targets = [Target("triton", "triton", minilm_server.grpc_url, "all_minilm_l6_v2"),
               Target("peer", "openai", openai_peer, "fake")]
    doc = run_bench(targets, corpus, counts, buckets=(32, 128, 256), concurrency=(1, 4), texts_per_request=2,
                    requests=12, warmup=2, inprocess_model=default_model_path(), only_buckets=("<=32", "mixed"))
    res = doc["results"]
    assert {(r["target"], r["bucket"], r["concurrency"]) for r in res if r["kind"] != "inprocess"} == \
        {(t, b, c) for t in ("triton", "peer") for b in ("<=32", "mixed") for c in (1, 4)}
    assert sum(r["kind"] == "inprocess" for r in res) == 2
    for r in res:
        assert set(r) == RESULT_KEYS
        assert r["sent"] == r["ok"] + r["errors"]
        assert r["errors"] == 0 and r["ok"] == 12
        assert 0 < r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"] <= r["max_ms"]
        assert r["texts_per_s"] == pytest.approx(2 * r["req_per_s"])
        assert r["tokens_per_s"] > r["texts_per_s"]
    tri = [r for r in res if r["target"] == "triton"]
    assert all(r["triton"]["all_minilm_l6_v2"]["requests"] >= 12 for r in tri)  # warm-up is counted by Triton too
    assert all(r["triton"]["all_minilm_l6_v2"]["queue_us"] >= 0 for r in tri)
    files = save(doc, tmp_path / "out")
    names = sorted(p.name for p in files)
    assert names == ["bench_le32.png", "bench_mixed.png", "results.json", "results.md"]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["scenario"]["requests"] == 12
    assert "| triton | <=32 | 4 |" in (tmp_path / "out" / "results.md").read_text()


def test_bench_counts_errors_and_cli_json(minilm_server, openai_peer, tmp_path):
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps(["FAIL this one", "a good text", "another good text"]))
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "bench", "--url", minilm_server.grpc_url, "--model",
                        "all_minilm_l6_v2", "--openai-url", openai_peer, "--openai-model", "fake", "--no-inprocess",
                        "--corpus", str(corpus), "--concurrency", "2", "--requests", "30", "--warmup", "0",
                        "--only", "mixed", "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    peer = next(r for r in doc["results"] if r["kind"] == "openai")
    tri = next(r for r in doc["results"] if r["kind"] == "triton")
    assert peer["sent"] == 30 == peer["ok"] + peer["errors"] and peer["errors"] > 0
    assert "HTTP 500" in peer["error_samples"][0]
    assert tri["errors"] == 0 and tri["ok"] == 30


def test_other_servers_are_paused_while_one_target_is_measured():
    from embtrt.kinds.embedder.measure_bench import _Paused

    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        state = lambda: Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]  # noqa: E731
        with _Paused([proc.pid]):
            until(lambda: state() == "T", 30, "the process stopped")
        until(lambda: state() == "S", 30, "the process continued")
        with _Paused([-proc.pid]):  # the process group
            until(lambda: state() == "T", 30, "the process group stopped")
    finally:
        proc.kill()
        proc.wait()


def test_bench_without_matplotlib_says_so_before_measuring_and_piped_tables_are_whole(openai_peer, tmp_path):
    block = tmp_path / "block" / "matplotlib"
    block.mkdir(parents=True)
    (block / "__init__.py").write_text("raise ImportError(\"No module named 'matplotlib' (blocked by the test)\")\n")
    import os

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(block.parent), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "bench", "--openai-url", openai_peer, "--openai-model",
                        "a-rather-long-peer-model-name-for-the-table", "--no-inprocess", "--concurrency", "1",
                        "--requests", "4", "--warmup", "1", "--only", "<=32", "--out", str(tmp_path / "res")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "pip install 'embtrt[bench]'" in p.stderr and "plots skipped" in p.stderr
    assert p.stderr.index("plots skipped") < p.stderr.index("wrote ")  # warned before the run, not after
    assert sorted(f.name for f in (tmp_path / "res").iterdir()) == ["results.json", "results.md"]
    row = next(line for line in p.stdout.splitlines() if "a-rather-long-peer-model-name-for-the-table" in line)
    assert row.startswith("| openai:a-rather-long-peer-model-name-for-the-table@" + openai_peer)


def test_bench_records_cpu_per_request_and_peak_memory_of_watched_process_trees(minilm_server, corpus):
    """--cpu-pid: the tritonserver tree (server and its Python stubs) is charged CPU for each request
    it serves and its peak resident memory is sampled during the scenario; an idle tree is charged
    next to nothing."""
    import os
    import subprocess

    from embtrt.kinds.embedder.measure_bench import tree_cpu_seconds, tree_rss_bytes
    from embtrt.kinds.embedder.measure import Reference
    from embtrt.reference.modelinfo import default_model_path

    idle = subprocess.Popen(["sleep", "60"])
    try:
        counts = Reference(default_model_path()).token_counts(corpus)
        targets = [Target("triton", "triton", minilm_server.grpc_url, "all_minilm_l6_v2")]
        pids = {"tritonserver": minilm_server.proc.pid, "idle": idle.pid}
        doc = run_bench(targets, corpus, counts, buckets=(32, 128, 256), concurrency=(4,), requests=40, warmup=4,
                        only_buckets=("mixed",), cpu_pids=pids)
    finally:
        idle.kill()
        idle.wait()
    (r,) = doc["results"]
    # CPU is attributed per process tree: the server's work to it, next to nothing to a sleeping process
    # (compared within the run, no machine-dependent limit)
    cpu = r["cpu_ms_per_req"]
    assert cpu["tritonserver"] > 0 and cpu["idle"] < cpu["tritonserver"] / 10, cpu
    assert r["client_cpu_ms_per_req"] > 0  # the load generator's own CPU: measured, reported apart
    # the tree holds the server and its stubs: hundreds of MiB, more than the server process alone
    assert r["peak_rss_mib"]["tritonserver"] > 200 and r["peak_rss_mib"]["idle"] < 50
    own = int(Path(f"/proc/{minilm_server.proc.pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert tree_rss_bytes(minilm_server.proc.pid) > own and tree_cpu_seconds(minilm_server.proc.pid) > 0


def test_rounds_interleave_the_targets_and_pool_their_requests(minilm_server, corpus):
    """--rounds 3: each target's 31 requests run in 3 rounds, the targets taking turns in each round (the
    order rotating), and one row per target pools them: 31 sent and answered, and the server's statistics
    counted each round's warm-up and requests."""
    from embtrt.kinds.embedder.measure import Reference
    from embtrt.reference.modelinfo import default_model_path

    counts = Reference(default_model_path()).token_counts(corpus)
    targets = [Target("door", "triton", minilm_server.grpc_url, "all_minilm_l6_v2"),
               Target("b32", "triton", minilm_server.grpc_url, "all_minilm_l6_v2_32")]
    seen: list[str] = []
    doc = run_bench(targets, corpus, counts, buckets=(32, 128, 256), concurrency=(2,), requests=31, warmup=2,
                    only_buckets=("<=32",), rounds=3, progress=seen.append)
    assert [m.split(":")[0] + m[-3:] for m in seen] == ["door1/3", "b321/3", "b322/3", "door2/3", "door3/3", "b323/3"]
    assert [r["target"] for r in doc["results"]] == ["door", "b32"] and doc["scenario"]["rounds"] == 3
    for r in doc["results"]:
        assert r["sent"] == r["ok"] == 31 and r["errors"] == 0 and r["p99_ms"] >= r["p50_ms"] > 0
        model = "all_minilm_l6_v2" if r["target"] == "door" else "all_minilm_l6_v2_32"
        assert r["triton"][model]["requests"] == 31 + 3 * 2  # three rounds of warm-up, and the requests
    with pytest.raises(SpecError, match="rounds"):
        run_bench(targets, corpus, counts, buckets=(32,), concurrency=(1,), requests=2, rounds=3)


def test_bench_cli_drives_triton_from_processes_beside_the_floor(minilm_server, tmp_path):
    """--processes N: the Triton target's load comes from N generator processes (their CPU in the load generator's
    column); --floor: the floor is served and measured as one more target, and the report judges the generator."""
    out = tmp_path / "b"
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "bench", "--url", minilm_server.grpc_url, "--model", "all_minilm_l6_v2",
                        "--no-inprocess", "--only", "<=32", "--concurrency", "1,4", "--requests", "24", "--warmup", "4",
                        "--processes", "2", "--floor", "--cpu-pid", f"tritonserver={minilm_server.proc.pid}", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    rows = {(r["target"], r["concurrency"]): r for r in doc["results"]}
    assert set(rows) == {(t, c) for t in ("triton:all_minilm_l6_v2", "floor (no encoder)") for c in (1, 4)}
    for r in rows.values():
        assert r["ok"] == 24 and r["errors"] == 0 and r["req_per_s"] > 0 and r["client_cpu_ms_per_req"] > 0
    assert rows[("triton:all_minilm_l6_v2", 4)]["triton"]["all_minilm_l6_v2"]["requests"] >= 24   # statistics read around it
    assert [t["processes"] for t in doc["targets"]] == [2, 2]
    md = (out / "results.md").read_text()
    assert "The load generator against the floor" in md
    assert sum("triton:all_minilm_l6_v2 <=32 c" in line and ("not the limit" in line or "generator-bound?" in line)
               for line in md.splitlines()) == 2


def test_bench_refuses_processes_and_floor_outside_embedding_scenarios():
    p = subprocess.run([sys.executable, "-m", "embtrt.cli", "bench", "--model", "m", "--sparse", "--floor"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "--processes and --floor apply to embedding scenarios only" in p.stdout + p.stderr
