"""ONNX Runtime on CPU at long inputs: the graph embtrt exports (eager attention, each L x L map written out) against
the same graph with ONNX Runtime's fused Attention (onnxruntime.transformers.optimizer, model_type bert), each with
the memory arena off (what a long-input build renders: ort_arena false) and on with its shrinkage after every run;
PyTorch (SDPA) in process beside them. A finding for #67 / #71's long inputs on CPU, not a served path.

    .venv/bin/python benchmarks/long_attention.py [--length 16384] [--heads 2] [--layers 2] [--out DIR]

A seeded tiny BERT (hidden 32) like tests/tiny_models.make_bert_16k; one text of --length tokens, batch 1, two
intra-op threads, each configuration in a process of its own (its peak resident memory is its own), 4 runs each:
the first is cold, the table gives the best of the other three and the peak."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIGS = {"arena off": "noarena", "arena on, shrunk after each run": "shrink"}


def _child(path: str, mode: str, length: int) -> None:
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.enable_mem_pattern = False
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if mode == "noarena":
        so.enable_cpu_mem_arena = False
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in s.get_inputs()]
    ids = np.random.default_rng(0).integers(5, 1000, (1, length))
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    ro = ort.RunOptions()
    if mode == "shrink":
        ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    times, out = [], None
    for _ in range(4):
        t0 = time.perf_counter()
        out = s.run(None, {k: feed[k] for k in names}, ro)[0]
        times.append(time.perf_counter() - t0)
    np.save(path + f".{mode}.npy", out)
    print(json.dumps({"best_ms": 1e3 * min(times[1:]), "first_ms": 1e3 * times[0],
                      "peak_gib": _peak_gib()}))


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip() + f", {os.cpu_count()} cores"
    return platform.machine()


def _peak_gib() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not carried over from the parent by exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--length", type=int, default=16384)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return _child(a.child[0], a.child[1], a.length)
    import numpy as np
    import torch
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import BertConfig, BertModel

    torch.manual_seed(5)
    cfg = BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=a.layers, num_attention_heads=a.heads,
                     intermediate_size=64, max_position_embeddings=a.length, attn_implementation="eager")
    model = BertModel(cfg, add_pooling_layer=False).eval()

    class Head(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state

    tmp = Path(tempfile.mkdtemp(prefix="long-attn-"))
    ids = torch.randint(5, 1000, (1, a.length))   # traced at the length it runs (a shorter trace may bake positions)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(Head(model), (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(tmp / "exported.onnx"),
                      input_names=names, output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={n: {0: "b", 1: "s"} for n in [*names, "last_hidden_state"]})
    fused = optimize_model(str(tmp / "exported.onnx"), model_type="bert", num_heads=a.heads, hidden_size=32, opt_level=1)
    fused.save_model_to_file(str(tmp / "fused.onnx"))
    ops = sorted({n.op_type for n in fused.model.graph.node} & {"Attention", "MultiHeadAttention"})
    x = torch.from_numpy(np.random.default_rng(0).integers(5, 1000, (1, a.length)))
    sdpa = BertModel(BertConfig(**{**cfg.to_dict(), "attn_implementation": "sdpa"}), add_pooling_layer=False).eval()
    sdpa.load_state_dict(model.state_dict())
    model = sdpa
    with torch.inference_mode():
        model(input_ids=x, attention_mask=torch.ones_like(x))
        t0 = time.perf_counter()
        ref = model(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state.numpy()
        torch_ms = 1e3 * (time.perf_counter() - t0)
    rows = []
    for graph in ("exported", "fused"):
        for label, mode in CONFIGS.items():
            p = subprocess.run([sys.executable, __file__, "--length", str(a.length), "--child", str(tmp / f"{graph}.onnx"), mode],
                               capture_output=True, text=True, check=True)
            r = json.loads(p.stdout.strip().splitlines()[-1])
            d = float(np.abs(np.load(tmp / f"{graph}.onnx.{mode}.npy") - ref).max())
            rows.append({"graph": graph + (f" ({', '.join(ops)})" if graph == "fused" else " (eager attention)"),
                         "memory": label, **r, "max_abs_diff_vs_torch": d})
    lines = [f"# ONNX Runtime at {a.length} tokens on CPU: exported vs fused attention", "",
             f"Machine: {_cpu()}, tiny BERT hidden 32, {a.heads} heads, {a.layers} "
             f"layers, batch 1, 2 intra-op threads; PyTorch SDPA in process: {torch_ms:.0f} ms", "",
             f"`.venv/bin/python benchmarks/long_attention.py --length {a.length} --heads {a.heads} --layers {a.layers}`", "",
             "| graph | memory | best of runs 2-4 ms | first run ms | peak RSS GiB | max abs diff vs PyTorch |",
             "|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r['graph']} | {r['memory']} | {r['best_ms']:.0f} | {r['first_ms']:.0f} | {r['peak_gib']:.2f} | "
              f"{r['max_abs_diff_vs_torch']:.1e} |" for r in rows]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "results.md").write_text(text)
        (a.out / "results.json").write_text(json.dumps({"torch_sdpa_ms": torch_ms, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
