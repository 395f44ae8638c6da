"""One model of the GPU kit served: tritonserver with the kit's stub, the served vectors against the fp32
reference, then the planned cells (benchmarks/gpukit/cells.py), most valuable first, each written as it is
measured; and the floor (a model with no encoder) that shows what the load generator can drive."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cells import DRY_FLOOR, FLOOR, ROUNDS, agreement, payloads, summarize, vectors_by_text
from load import Http, in_process, reload_with

GATE = {"p50": 0.9999, "p01": 0.999}   # docs/verify.md: the usual thresholds, per bucket
LONG = 448   # the "512" band: texts of 449-512 tokens (the bucket's own length, as the targets say)


def band_texts(folder: Path, buckets: tuple[int, ...], corpus: list[str], count: int) -> dict[str, list[str]]:
    """Texts per length band: each bucket's (<=B: longer than the bucket below), and "B" for the largest
    bucket's texts near its length (B - 63 .. B tokens)."""
    from models import texts_in_band

    out, low = {}, 2
    for b in buckets:
        out[f"<={b}"] = texts_in_band(folder / "tokenizer.json", corpus, low, b, count)
        low = b
    top = buckets[-1]
    out[str(top)] = texts_in_band(folder / "tokenizer.json", corpus, top - 64 if top > 128 else top // 2, top, count)
    return out


def parity(url: str, name: str, bands: dict[str, list[str]], ref: dict[str, np.ndarray]) -> dict:
    h = Http(url)
    try:
        out = {}
        for label, texts in bands.items():
            got = np.concatenate([h.embed(name, texts[i:i + 8]) for i in range(0, len(texts), 8)])
            r = ref[label]
            cos = np.sum(got * r, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(r, axis=1))
            out[label] = {"texts": len(texts), "cosine_p50": float(np.median(cos)),
                          "cosine_p01": float(np.percentile(cos, 1)), "cosine_min": float(cos.min())}
            out[label]["passed"] = out[label]["cosine_p50"] >= GATE["p50"] and out[label]["cosine_p01"] >= GATE["p01"]
        return out
    finally:
        h.close()


def apart(vectors: np.ndarray) -> float:
    """The median cosine between different texts' reference vectors (a model that tells texts apart
    is well below 0.99)."""
    v = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sim = v @ v.T
    return float(np.median(sim[~np.eye(len(v), dtype=bool)]))


def graph_params(repo: Path, name: str, on: bool, device: str) -> dict[str, str]:
    """The front door's parameters for CUDA graphs on or off. On CUDA the build captured them; off is
    cuda_graphs false (rows still padded to the bucket, so only the graphs differ). On the CPU the
    build has none: on is the static-shape stand-in (the build's graph shapes, rows padded)."""
    if device == "cuda":
        return {"cuda_graphs": str(on).lower()}
    if not on:
        return {"cuda_graphs": "false", "pad_to_bucket": "false"}
    from embtrt.repository.manifest import read_manifest
    from embtrt_backend.torch_graphs import format_graph_shapes, graph_batch_sizes

    m = read_manifest(repo)
    shapes = {b: graph_batch_sizes(int(m.bucket_max_batch[b])) for b in m.buckets}
    return {"cuda_graphs": "true", "graph_shapes": format_graph_shapes(shapes), "pad_to_bucket": "true"}


def statics(log: Path) -> list[str]:
    """The static-shape lines each python-torch instance wrote to the server log: what it captured at
    load, and its count of runs on static shapes against eager ones."""
    if not log.is_file():
        return []
    return [line.strip() for line in log.read_text(errors="replace").splitlines() if "embtrt python-torch:" in line]


def _to_kind_cpu(repo: Path) -> int:
    """Every KIND_GPU instance group of the repository as KIND_CPU (PyTorch still runs on cuda:0):
    the fallback when this tritonserver refuses GPU instances for the Python backend."""
    n = 0
    for cfg in repo.glob("*/config.pbtxt"):
        text = cfg.read_text()
        if "KIND_GPU" in text:
            cfg.write_text(text.replace("kind: KIND_GPU", "kind: KIND_CPU").replace("gpus: [0]", "").replace("gpus: [ 0 ]", ""))
            n += 1
    return n


def server_spec(repo: Path, srv: dict, log: Path, models: tuple[str, ...] | None, startup_s: float):
    from embtrt.serve.server import ServerSpec, free_port

    return ServerSpec(repo, grpc_port=free_port(), http_port=free_port(), metrics_port=free_port(),
                      tritonserver=srv["tritonserver"], backend_directory=srv["backend_directory"],
                      python_env=srv["python_env"], models=models, log_file=log, graceful_exit=False,
                      startup_timeout_s=startup_s)


def drive(server, name: str, texts: list[str], plan: tuple, cell, load: dict) -> list:
    from embtrt.measure.loadgen import Job, run_rounds

    url = server.grpc_url if load["protocol"] == "grpc" else server.http_url
    job = Job(url, name, tuple(tuple(texts[i] for i in p) for p in plan), cell.requests, cell.conc,
              load["processes"], load["protocol"], warmup=min(cell.requests, max(2 * cell.conc, 16)), keep=True)
    return run_rounds(job, ROUNDS)


def measure_floor(kit, work: Path, srv: dict, texts: list[str], load: dict, dry: bool) -> dict:
    """The floor model (no encoder) on the kit's tritonserver, driven by the same generator: what it can drive."""
    from embtrt.measure.floor import FLOOR_MODEL, write_floor
    from embtrt.serve.server import TritonServer

    repo = write_floor(work / "floor", dim=1024, max_batch_size=64)   # the widest model's vectors back
    out = {}
    with TritonServer(server_spec(repo, srv, work / "tritonserver-floor.log", None, 120.0)) as server:
        for cell in (DRY_FLOOR if dry else FLOOR):
            plan = payloads(texts, cell.per, cell.requests)
            out[f"c{cell.conc}"] = summarize(cell, drive(server, FLOOR_MODEL, texts, plan, cell, load), plan, None)
            kit.log(f"floor c{cell.conc}: {out[f'c{cell.conc}']['req_per_s']['median']} req/s, "
                    f"p50 {out[f'c{cell.conc}']['p50_ms']['median']} ms ({load['protocol']}, {load['processes']} processes)")
    return out


def serve_and_measure(kit, rec: dict, name: str, folder: Path, repo: Path, work: Path, srv: dict, device: str,
                      buckets: tuple[int, ...], corpus: list[str], dry: bool, plan: list, load: dict,
                      reserve_s: float = 0.0) -> None:
    """Parity per bucket, then the planned cells in order while more than `reserve_s` (the later models'
    share) is left; every timed vector compared with its reference."""
    import torch
    from sentence_transformers import SentenceTransformer

    from embtrt.errors import ServerError
    from embtrt.serve.server import TritonServer

    bands = band_texts(folder, buckets, corpus, 16 if dry else 64)
    st = SentenceTransformer(str(folder), device=device)
    ref = {label: st.encode(texts, batch_size=16, convert_to_numpy=True) for label, texts in bands.items()}
    rec["apart_median_cosine"] = round(apart(np.concatenate(list(ref.values()))), 4)
    kit.log(f"{name}: reference texts apart, median cosine {rec['apart_median_cosine']}")
    log = work / f"tritonserver-{name}.log"

    def spec():
        return server_spec(repo, srv, log, (name,), max(60.0, min(300.0, kit.left() - reserve_s - 20)))

    cells: list[dict] = []
    rec["cells"] = cells
    try:
        server = TritonServer(spec()).__enter__()
    except ServerError as exc:
        if "KIND_GPU" not in log.read_text(errors="replace") and "GPU" not in str(exc):
            raise
        rec["instance_kind_fallback"] = f"KIND_GPU refused ({str(exc)[:300]}); {_to_kind_cpu(repo)} configs as KIND_CPU"
        kit.log(f"[x] {name}: {rec['instance_kind_fallback']}; PyTorch still on cuda:0")
        server = TritonServer(spec()).__enter__()
    try:
        kit.log(f"{name}: served at {server.grpc_url} (gRPC) / {server.http_url}")
        rec["parity"] = parity(server.http_url, name, {k: v for k, v in bands.items() if k.startswith("<=")}, ref)
        for label, p in rec["parity"].items():
            kit.log(f"{'[ok]' if p['passed'] else '[x] '} {name} served {label}: cosine p50 {p['cosine_p50']:.6f} "
                    f"p01 {p['cosine_p01']:.6f} min {p['cosine_min']:.6f}")
        kit.write()
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(rec["build"]["precision"])
        if dtype is not None:
            st.to(dtype)
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        # the build's own: graphs captured on CUDA; on the CPU eager (the static shapes are switched on by a reload)
        state: dict = {"graphs": device == "cuda", "vectors": {}}
        for item in plan:
            if item == "inprocess":
                if kit.left() - reserve_s < 30:
                    continue
                # one text at a time for the bands timed one text per request, batches of 32 for those timed batched
                used = sorted({(c.band, 1 if c.per == 1 else 32) for c in plan if c != "inprocess"})
                rec["in_process"] = {f"{band} x{batch}": in_process(st, bands[band], batch, sync, dry) for band, batch in used}
                kit.log(f"{name} in process: " + "; ".join(f"{b} {v}" for b, v in rec["in_process"].items()))
                kit.write()
                continue
            cell = item
            if kit.left() - reserve_s < 25:
                kit.log(f"[skip] {name} {cell.key}: {kit.left():.0f} s left")
                continue
            if state["graphs"] != cell.graphs:
                reload_with(server.http_url, name, graph_params(repo, name, cell.graphs, device))
                state["graphs"] = cell.graphs
            texts = bands[cell.band]
            p = payloads(texts, cell.per, cell.requests)
            outcomes = drive(server, name, texts, p, cell, load)
            got = summarize(cell, outcomes, p, ref[cell.band])
            mine = vectors_by_text(outcomes[-1], p)
            twin = state["vectors"].get((cell.band, not cell.graphs))
            if twin is not None:
                got["graphs_on_vs_off"] = agreement(mine, twin)
            state["vectors"].setdefault((cell.band, cell.graphs), {}).update(mine)
            cells.append(got)
            kit.log(f"{name} {cell.key}: {got['req_per_s']['median']} req/s ({got['texts_per_s']['median']} texts/s), "
                    f"p50 {got['p50_ms']['median']} ms, p99 {got['p99_ms']['median']} ms, min cosine "
                    f"{got.get('min_cosine')}, errors {got['errors']}")
            kit.write()
        rec["static_shapes"] = statics(log)[-4:]
    finally:
        server.__exit__(None, None, None)
