"""The GPU kit's dry run, in make test-all's slow tier (CI runs it; about 40 s alone, 75-95 s beside the default
tier's other worker, which make test's 10-minute bound could not hold): the same scripts that run on a lent GPU machine, end to
end on this CPU in under a minute (pack, unpack into a temporary folder, set up the stub, the floor model
driven by the load generator, tiny builds for python-torch served by the kit's own tritonserver, parity,
the planned cells repeated with every timed vector compared with its reference, the static-shape runs
against eager ones, the in-process peer, the table). Only torch.cuda's graphs and the Python 3.12 stub are
left to the GPU host (the kit checks the stub first there)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_the_gpu_kit_packs_unpacks_and_runs_its_whole_script_on_the_cpu(tmp_path):
    kit = tmp_path / "kit"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/gpukit/pack.py"), "--out", str(kit), "--xz-level", "0",
                    "--no-downloads"], check=True, cwd=ROOT, timeout=600)
    packed = json.loads((kit / "kit.json").read_text())
    assert packed["stubs"] == ["3.11", "3.12"] and "tritonserver.tar.xz" in packed["files"]
    assert "tokenizer/tokenizer.json" in packed["files"] and not any(f.endswith(".safetensors") for f in packed["files"])
    assert packed["total_bytes"] <= packed["limit_bytes"] == 64 << 20
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks/gpukit/kit.py"), "--dry-run", "--kit", str(kit),
                        "--out", str(out), "--deadline-s", "400", "--stub-venv"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    doc = json.loads((out / "results.json").read_text())
    assert doc["device"] == "cpu" and "failed" not in doc["setup"] and "error" not in doc
    assert doc["load"] == {"protocol": "grpc", "processes": 1, "generator": "embtrt.measure.loadgen"}
    assert set(doc["floor"]) == {"c1", "c8"} and all(f["errors"] == 0 and f["rounds"] == 3 for f in doc["floor"].values())
    assert list(doc["models"]) == ["minilm", "xlmr-large"]
    for key, rec in doc["models"].items():
        assert rec["build"]["precision"] == "fp32" and rec["apart_median_cosine"] < 0.99, key
        assert set(rec["parity"]) == {"<=16", "<=64"} and all(p["passed"] for p in rec["parity"].values()), rec["parity"]
        for c in rec["cells"]:
            assert c["errors"] == 0 and c["rounds"] == 3 and c["req_per_s"]["min"] > 0, c
            # every timed vector was kept and compared with the reference of its text
            assert c["vectors_compared"] == c["requests"] * c["per"] and c["min_cosine"] >= 0.99999, c
    minilm = {(c["band"], c["per"], c["concurrency"], c["graphs"]): c for c in doc["models"]["minilm"]["cells"]}
    assert set(minilm) == {("<=16", 1, 1, True), ("<=16", 1, 4, True), ("<=64", 8, 8, True), ("<=16", 1, 4, False)}
    assert minilm[("<=16", 1, 4, False)]["graphs_on_vs_off"]["min_cosine"] >= 0.99999   # off against on, same texts
    inproc = doc["models"]["minilm"]["in_process"]
    assert set(inproc) == {"<=16 x1", "<=64 x32"}   # one text at a time where cells were one text per request
    assert inproc["<=16 x1"]["p50_ms"] > 0 and inproc["<=64 x32"]["texts_per_s"] > 0 and inproc["<=16 x1"]["passes"] == 3
    # the graphs-on cells ran on the static shapes: the instances counted their runs in the server log
    assert any(" runs, " in line and " on static shapes, 0 eager" in line and " 0 on static" not in line
               for line in doc["models"]["minilm"]["static_shapes"]), doc["models"]["minilm"]["static_shapes"]
    table = (out / "table.md").read_text()
    assert "## Targets (issue #67)" in table and "| <=16 | 1 | 4 | off |" in table and "The floor" in table
    log = (out / "kit.log").read_text()
    assert "[ok] tritonserver unpacked, stub for Python 3.11" in log and "done" in log
    # the stub ran its own venv over this Python's packages, as on the GPU host (whose python3 is a venv)
    assert "[ok] the stub's Python (a venv over this Python's packages)" in log and doc["setup"]["stub_python"].endswith("stubenv")
    assert len([p for p in out.iterdir() if p.is_file()]) <= 8   # what the device tool brings back
    served = (out / "tritonserver-minilm.log").read_text()
    assert "embtrt python-torch: 12 static shapes ready on cpu (eager stand-in without CUDA): 16:1,2,4,8,16,32;64:1,2,4,8,16,32" \
        in served, served[-2000:]
