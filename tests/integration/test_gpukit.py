"""The GPU kit's dry run: the same scripts that run on a lent GPU machine, end to end on this CPU
(pack, unpack into a temporary folder, set up the stub, build tiny models for python-torch, serve
them with the kit's own tritonserver, check parity, measure with and without the static-shape
runs, write the table). Only torch.cuda's graphs and the Python 3.12 stub are left to the GPU host
(the kit checks the stub first there)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~80 s: pack, two tiny builds, two servers, 32 measured cells; make test-all
def test_the_gpu_kit_packs_unpacks_and_runs_its_whole_script_on_the_cpu(tmp_path):
    kit = tmp_path / "kit"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/gpukit/pack.py"), "--out", str(kit), "--xz-level", "0",
                    "--no-downloads"], check=True, cwd=ROOT, timeout=600)
    packed = json.loads((kit / "kit.json").read_text())
    assert packed["stubs"] == ["3.11", "3.12"] and "tritonserver.tar.xz" in packed["files"]
    assert "tokenizer/tokenizer.json" in packed["files"] and not any(f.endswith(".safetensors") for f in packed["files"])
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks/gpukit/kit.py"), "--dry-run", "--kit", str(kit),
                        "--out", str(out), "--deadline-s", "400", "--stub-venv"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    doc = json.loads((out / "results.json").read_text())
    assert doc["device"] == "cpu" and "failed" not in doc["setup"] and "error" not in doc
    assert set(doc["models"]) == {"minilm", "xlmr-large"}
    for key, rec in doc["models"].items():
        assert rec["build"]["precision"] == "fp32" and rec["apart_median_cosine"] < 0.99, key
        assert set(rec["parity"]) == {"<=16", "<=64"} and all(p["passed"] for p in rec["parity"].values()), rec["parity"]
        cells = {(c["bucket"], c["graphs"], c["concurrency"]): c for c in rec["cells"]}
        assert len(cells) == 16 and all(c["errors"] == 0 and c["req_per_s"] > 0 for c in cells.values()), cells
        assert set(rec["in_process"]) == {"<=16", "<=64"}
        # the graphs-on cells ran on the static shapes: the instances counted their runs in the server log
        assert any(" runs, " in line and " on static shapes, 0 eager" in line and " 0 on static" not in line
                   for line in rec["static_shapes"]), rec["static_shapes"]
    table = (out / "table.md").read_text()
    assert "| <=16 | on | 4 |" in table and "| <=64 | off | 64 |" in table and "in process: single p50" in table
    log = (out / "kit.log").read_text()
    assert "[ok] tritonserver unpacked, stub for Python 3.11" in log and "done" in log
    # the stub ran its own venv over this Python's packages, as on the GPU host (whose python3 is a venv)
    assert "[ok] the stub's Python (a venv over this Python's packages)" in log and doc["setup"]["stub_python"].endswith("stubenv")
    assert len([p for p in out.iterdir() if p.is_file()]) <= 8   # what the device tool brings back
    # the graphs-on cells ran the static shapes: each front-door instance reported them at load
    served = (out / "tritonserver-minilm.log").read_text()
    assert "embtrt python-torch: 12 static shapes ready on cpu (eager stand-in without CUDA): 16:1,2,4,8,16,32;64:1,2,4,8,16,32" \
        in served, served[-2000:]
