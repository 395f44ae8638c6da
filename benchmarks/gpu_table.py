"""Per-bucket TensorRT plan latency and parity for the bundled MiniLM (run by `make gpu-check`).

    python benchmarks/gpu_table.py [--precision fp16] [--fp32-layers]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> int:
    from embtrt.common.gpu import tensorrt_available

    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--fp32-layers", action="store_true")
    args = ap.parse_args()
    ok, why = tensorrt_available()
    if not ok:
        print(f"gpu table skipped: {why}")
        return 0
    from embtrt.export import build
    from embtrt.common.backend import backend_lib
    from embtrt.common.corpus import load_corpus
    from embtrt.export.onnx2trt import PLAN, PlanRunner, host_info
    from embtrt.reference.parity import cosine_rows
    from embtrt.export.spec_options import spec_from_options

    out = Path(tempfile.mkdtemp()) / "repo"
    t0 = time.time()
    build(spec_from_options(None, out, target="tensorrt", precision=args.precision, fp32_layers=args.fp32_layers),
          log=lambda m: None)
    print(f"built {out} in {time.time() - t0:.0f} s on {host_info()}")
    m = json.loads((out / "embtrt.json").read_text())
    text_mod, enc_mod = backend_lib()
    tok = text_mod.TextTokenizer(str(out / m["name"] / "1" / "tokenizer.json"), m["max_seq_length"], m["pad_id"])
    texts = load_corpus()
    enc = tok.encode(texts)
    print(f"{'bucket':>6} {'batch':>5} {'p50 ms':>8} {'texts/s':>9} {'cos min vs ONNX':>16}")
    for b in m["buckets"]:
        d = out / f"{m['name']}_{b}_encoder"
        recipe = json.loads((d / "embtrt_engine.json").read_text())
        ort = enc_mod.OrtEncoder(str(d / recipe["gate_onnx"]), optimize=recipe["gate_run"] == "exact")
        runner = PlanRunner(d / PLAN)
        for bs in sorted({1, 8, recipe["max_batch"]}):
            rows = list(range(bs))
            feeds = tok.pad(enc, rows, b, tuple(m["input_names"]))
            got = runner.run(feeds, m["encoder_output"])
            cos = cosine_rows(ort.run(feeds), got).min()
            lat = []
            for _ in range(30):
                s = time.perf_counter()  # Polygraphy's runner returns host arrays: the run is complete
                runner.run(feeds, m["encoder_output"])
                lat.append((time.perf_counter() - s) * 1e3)
            p50 = float(np.median(lat))
            print(f"{b:>6} {bs:>5} {p50:>8.2f} {bs / p50 * 1e3:>9.0f} {cos:>16.6f}")
    print("note: latencies include host-to-device copies and a stream sync per call (no CUDA graphs); "
          "Triton's served numbers come from `embtrt bench` against a tritonserver with the TensorRT backend")
    return 0


if __name__ == "__main__":
    sys.exit(main())
