"""Memory under a burst of maximal legal images (#53 item 5): the tritonserver's resident memory (with its
Python stubs: the front door decodes) idle and at peak while bursts of requests of the largest images the
front door takes (36 million pixels, under the 8 MiB file limit) arrive at a concurrency over gRPC; every
request must be served, one image over the pixel limit refused, and a small request served after.

    python benchmarks/image_memory.py --url 127.0.0.1:PORT --model NAME --triton-pid PID --out DIR

Run by benchmarks/run_image_bench.sh after its bench (the same server)."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "builder"))

from embtrt.measure.samplers import PeakRss, tree_rss_bytes  # noqa: E402


def big_jpeg(w: int, h: int, seed: int) -> bytes:
    """A w x h JPEG of smooth structure (a photo's compressibility), under the 8 MiB limit."""
    import numpy as np
    from PIL import Image

    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    rgb = np.stack([(x / w * 255 + seed * 40) % 256, (y / h * 255) % 256, ((x + y) / (w + h) * 255 + seed * 90) % 256], -1)
    buf = io.BytesIO()
    Image.fromarray(rgb.astype(np.uint8)).save(buf, "JPEG", quality=85)
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--triton-pid", type=int, required=True)
    ap.add_argument("--images-per-request", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--bursts", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--output", default="EMBEDDING", help="the output each image gives a row of (a page-image retriever's: "
                    "TOKEN_EMBEDDINGS)")
    a = ap.parse_args()
    import tritonclient.grpc.aio as aioclient

    from embtrt.serve.wire import text_input

    files = [big_jpeg(6000, 6000, s) for s in range(a.images_per_request)]   # 36,000,000 pixels: the default limit
    over = big_jpeg(6001, 6000, 9)
    idle = tree_rss_bytes(a.triton_pid)
    results = {"ok": 0, "failed": []}

    async def run() -> float:
        async with aioclient.InferenceServerClient(a.url) as c:
            async def one() -> None:
                try:
                    r = await c.infer(a.model, [text_input(files, "IMAGE")], client_timeout=600)
                    assert r.as_numpy(a.output).shape[0] == len(files)
                    results["ok"] += 1
                except Exception as exc:  # noqa: BLE001 (recorded)
                    results["failed"].append(str(exc)[:200])
            t0 = time.perf_counter()
            for _ in range(a.bursts):
                await asyncio.gather(*(one() for _ in range(a.concurrency)))
            took = time.perf_counter() - t0
            try:
                await c.infer(a.model, [text_input([over], "IMAGE")], client_timeout=600)
                results["over_limit"] = "served (wrong)"
            except Exception as exc:  # noqa: BLE001
                results["over_limit"] = str(exc)[:200]
            small = await c.infer(a.model, [text_input([big_jpeg(640, 480, 1)], "IMAGE")], client_timeout=60)
            results["small_after"] = list(small.as_numpy(a.output).shape)
            return took

    with PeakRss({"tritonserver": a.triton_pid}) as peak:
        took = asyncio.run(run())
    after = tree_rss_bytes(a.triton_pid)
    doc = {"images_per_request": a.images_per_request, "image_pixels": 6000 * 6000,
           "image_bytes": [len(f) for f in files], "concurrency": a.concurrency, "bursts": a.bursts,
           "seconds": round(took, 2), "images_per_s": round(a.bursts * a.concurrency * len(files) / took, 2),
           "tritonserver_rss_mib": {"idle": round(idle / 2**20, 1), "peak": peak.mib()["tritonserver"],
                                    "after": round(after / 2**20, 1)},
           **results}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "memory.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    if results["failed"] or "INVALID_ARGUMENT" not in results.get("over_limit", ""):
        raise SystemExit("a maximal legal request failed, or the image over the limit was not refused")


if __name__ == "__main__":
    main()
