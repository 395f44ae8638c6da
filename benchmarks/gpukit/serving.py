"""One model of the GPU kit served: tritonserver with the kit's stub, the served vectors against the
fp32 reference, then the measured cells, most valuable first, each written as it is measured."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from load import Http, closed_loop, in_process, reload_with

CONCURRENCY = (4, 1, 16, 64)
GATE = {"p50": 0.9999, "p01": 0.999}   # docs/verify.md: the usual thresholds, per bucket


def band_texts(folder: Path, buckets: tuple[int, ...], corpus: list[str], count: int) -> dict[str, list[str]]:
    from models import texts_in_band

    out, low = {}, 2
    for b in buckets:
        out[f"<={b}"] = texts_in_band(folder / "tokenizer.json", corpus, low, b, count)
        low = b
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


def serve_and_measure(kit, rec: dict, name: str, folder: Path, repo: Path, work: Path, srv: dict, device: str,
                      buckets: tuple[int, ...], corpus: list[str], dry: bool, reserve_s: float = 0.0) -> None:
    """Parity, then the cells most valuable first: concurrency 4 with graphs, the in-process peer,
    concurrency 4 without graphs; then the other concurrencies with and without, while more than
    `reserve_s` (the later models' share) is left."""
    import torch
    from sentence_transformers import SentenceTransformer

    from embtrt.errors import ServerError
    from embtrt.serve.server import ServerSpec, TritonServer, free_port

    bands = band_texts(folder, buckets, corpus, 16 if dry else 64)
    st = SentenceTransformer(str(folder), device=device)
    ref = {label: st.encode(texts, batch_size=16, convert_to_numpy=True) for label, texts in bands.items()}
    rec["apart_median_cosine"] = round(apart(np.concatenate(list(ref.values()))), 4)
    kit.log(f"{name}: reference texts apart, median cosine {rec['apart_median_cosine']}")
    log = work / f"tritonserver-{name}.log"

    def spec() -> ServerSpec:
        return ServerSpec(repo, grpc_port=free_port(), http_port=free_port(), metrics_port=free_port(),
                          tritonserver=srv["tritonserver"], backend_directory=srv["backend_directory"],
                          python_env=srv["python_env"], models=(name,), log_file=log, graceful_exit=False,
                          startup_timeout_s=max(60.0, min(300.0, kit.left() - reserve_s - 20)))

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
        url = server.http_url
        kit.log(f"{name}: served at {url}")
        rec["parity"] = parity(url, name, bands, ref)
        for label, p in rec["parity"].items():
            kit.log(f"{'[ok]' if p['passed'] else '[x] '} {name} served {label}: cosine p50 {p['cosine_p50']:.6f} "
                    f"p01 {p['cosine_p01']:.6f} min {p['cosine_min']:.6f}")
        kit.write()
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(rec["build"]["precision"])
        if dtype is not None:
            st.to(dtype)
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        n, secs = (24, 2.0) if dry else (400, 2.0)
        state = {"graphs": None}

        def cells_at(graphs: bool, concs: tuple[int, ...], reserve: float) -> None:
            if state["graphs"] != graphs:
                if kit.left() - reserve < 20:
                    return
                reload_with(url, name, graph_params(repo, name, graphs, device))
                state["graphs"] = graphs
            for conc in concs:
                for label, texts in bands.items():
                    if kit.left() - reserve < secs + 5:
                        kit.log(f"[skip] {name} {label} graphs={graphs} c{conc}: {kit.left():.0f} s left")
                        continue
                    got = closed_loop(url, name, texts, conc, n, secs)
                    cells.append({"bucket": label, "graphs": graphs, "concurrency": conc, **got})
                    kit.log(f"{name} {label} graphs={graphs} c{conc}: {got['req_per_s']} req/s p50 {got['p50_ms']} ms "
                            f"p99 {got['p99_ms']} ms errors {got['errors']}")
                    kit.write()

        cells_at(True, CONCURRENCY[:1], 0.0)   # the most valuable cells: concurrency 4 with graphs
        rec["static_shapes"] = statics(log)[-4:]
        if kit.left() > 20:   # the in-process peer, right after
            rec["in_process"] = {label: in_process(st, texts, n, 32, secs, sync) for label, texts in bands.items()}
            kit.log(f"{name} in process: " + "; ".join(
                f"{label} single p50 {v['single']['p50_ms']} ms, batch 32 {v['batch']['texts_per_s']} texts/s"
                for label, v in rec["in_process"].items()))
            kit.write()
        cells_at(False, CONCURRENCY[:1], 0.0)
        cells_at(False, CONCURRENCY[1:], reserve_s)
        cells_at(True, CONCURRENCY[1:], reserve_s)
        rec["static_shapes"] = statics(log)[-4:]
    finally:
        server.__exit__(None, None, None)
