"""Memory under maximal legal token-vector requests (#52 item 5): the gateway's and the tritonserver's
(with its Python stubs) resident memory, idle and at peak, while bursts of requests as large as the
gateway answers (--max-vector-bytes of float32 token vectors) go to POST /pooling; one request just over
the cap must get 413 naming the flag, and a small request must still be served after the bursts.

    python benchmarks/multivector_memory.py --url http://127.0.0.1:PORT --model NAME --gateway-pid PID \
        --triton-pid PID --max-vector-bytes 33554432 --out DIR

Run by benchmarks/run_multivector_rerank.sh after its bench (the same servers)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "builder"))

from embtrt.common.corpus import load_corpus  # noqa: E402
from embtrt.measure.samplers import PeakRss, tree_rss_bytes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--gateway-pid", type=int, required=True)
    ap.add_argument("--triton-pid", type=int, required=True)
    ap.add_argument("--max-vector-bytes", type=int, default=32 << 20)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--document-tokens", type=int, default=256)
    ap.add_argument("--bursts", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    import httpx

    corpus = load_corpus()
    long = [" ".join(corpus[i:i + 24]) for i in range(len(corpus) - 24)]   # each over the length: cut at it
    per_doc = a.document_tokens * a.dim * 4
    n = a.max_vector_bytes // per_doc                   # the most documents of full length the cap allows
    legal = [long[i % len(long)] for i in range(n)]
    pids = {"gateway": a.gateway_pid, "tritonserver": a.triton_pid}
    idle = {k: round(tree_rss_bytes(p) / 2**20, 1) for k, p in pids.items()}
    over = httpx.post(f"{a.url}/pooling", json={"model": a.model, "input": legal + [long[0]]}, timeout=300)
    body = over.json()

    async def burst() -> list[float]:
        async with httpx.AsyncClient(timeout=600) as c:
            async def one() -> float:
                t0 = time.perf_counter()
                r = await c.post(f"{a.url}/pooling", json={"model": a.model, "input": legal})
                if r.status_code != 200 or len(r.json()["data"]) != n:
                    raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
                return time.perf_counter() - t0
            return await asyncio.gather(*(one() for _ in range(a.concurrency)))

    seconds = []
    with PeakRss(pids) as peak:
        for _ in range(a.bursts):
            seconds += asyncio.run(burst())
    after = {k: round(tree_rss_bytes(p) / 2**20, 1) for k, p in pids.items()}
    small = httpx.post(f"{a.url}/pooling", json={"model": a.model, "input": ["still served"]}, timeout=60)
    out = {"max_vector_bytes": a.max_vector_bytes, "documents_per_request": n, "document_tokens": a.document_tokens,
           "dim": a.dim, "requests": len(seconds), "concurrency": a.concurrency,
           "seconds_per_request": {"min": round(min(seconds), 2), "max": round(max(seconds), 2)},
           "rss_mib": {"idle": idle, "peak": peak.mib(), "after": after},
           "over_the_cap": {"status": over.status_code, "message": str(body.get("error", body))[:300]},
           "small_request_after": small.status_code}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "memory.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    if over.status_code != 413 or small.status_code != 200:
        raise SystemExit("the cap or the recovery failed")


if __name__ == "__main__":
    main()
