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


def serve_and_measure(kit, rec: dict, name: str, folder: Path, repo: Path, work: Path, srv: dict, device: str,
                      buckets: tuple[int, ...], corpus: list[str], dry: bool) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    from embtrt.serve.server import ServerSpec, TritonServer, free_port

    bands = band_texts(folder, buckets, corpus, 16 if dry else 64)
    st = SentenceTransformer(str(folder), device=device)
    ref = {label: st.encode(texts, batch_size=16, convert_to_numpy=True) for label, texts in bands.items()}
    rec["apart_median_cosine"] = round(apart(np.concatenate(list(ref.values()))), 4)
    kit.log(f"{name}: reference texts apart, median cosine {rec['apart_median_cosine']}")
    spec = ServerSpec(repo, grpc_port=free_port(), http_port=free_port(), metrics_port=free_port(),
                      tritonserver=srv["tritonserver"], backend_directory=srv["backend_directory"],
                      python_env=srv["python_env"], models=(name,), log_file=work / f"tritonserver-{name}.log",
                      startup_timeout_s=300)
    cells: list[dict] = []
    rec["cells"] = cells
    with TritonServer(spec) as server:
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
        n, secs = (24, 2.0) if dry else (400, 3.0)
        for graphs in (True, False):
            if kit.left() < 10:
                break
            reload_with(url, name, graph_params(repo, name, graphs, device))
            for conc in CONCURRENCY:
                for label, texts in bands.items():
                    if kit.left() < secs + 5:
                        kit.log(f"[skip] {name} {label} graphs={graphs} c{conc}: {kit.left():.0f} s left")
                        continue
                    got = closed_loop(url, name, texts, conc, n, secs)
                    cells.append({"bucket": label, "graphs": graphs, "concurrency": conc, **got})
                    kit.log(f"{name} {label} graphs={graphs} c{conc}: {got['req_per_s']} req/s p50 {got['p50_ms']} ms "
                            f"p99 {got['p99_ms']} ms errors {got['errors']}")
                    kit.write()
                if graphs and conc == CONCURRENCY[0] and kit.left() > 20:   # the in-process peer, right after
                    rec["in_process"] = {label: in_process(st, texts, n, 32, secs, sync) for label, texts in bands.items()}
                    kit.log(f"{name} in process: " + "; ".join(
                        f"{label} single p50 {v['single']['p50_ms']} ms, batch 32 {v['batch']['texts_per_s']} texts/s"
                        for label, v in rec["in_process"].items()))
                    kit.write()
