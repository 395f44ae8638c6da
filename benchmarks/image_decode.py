"""The cost of turning an encoded image into CLIP's pixel_values (#53 item 2): embtrt_backend.images
(decode: header, bounds, Pillow's decode, EXIF orientation, RGB; then resize / crop / rescale / normalize)
against transformers' own path (load_image on the data URI, CLIPImageProcessorPil), per image, on
seeded photos-like images of common sizes and formats, one thread, median of 5 passes.

    .venv/bin/python benchmarks/image_decode.py --out benchmarks/results/image-decode-YYYYMMDD
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_backend"))

from embtrt_backend import InputError  # noqa: E402
from embtrt_backend.images import ProcessorConfig, decode, from_data_uri, pixel_values  # noqa: E402

SIZES = ((640, 480), (1280, 960), (3000, 2000))
FORMATS = ("JPEG", "PNG", "WEBP")


def photo(w: int, h: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // (w - 1), y * 255 // (h - 1), ((x // 7 + y // 5) * 11) % 256], -1)
    return np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)


def timed(fn, n: int = 5) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    from PIL import Image
    from transformers.image_utils import load_image
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    out = ap.parse_args().out
    proc, cfg = CLIPImageProcessorPil(), ProcessorConfig()
    rows = []
    for w, h in SIZES:
        img = Image.fromarray(photo(w, h, w))
        for fmt in FORMATS:
            buf = io.BytesIO()
            img.save(buf, fmt, **({"quality": 90} if fmt != "PNG" else {}))
            uri = f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode()
            try:
                ours: float | str = timed(lambda: pixel_values(decode(from_data_uri(uri, 0)), cfg))
            except InputError as exc:   # over the default limits: refused, as served
                ours = f"refused ({str(exc).split(': ', 1)[1][:40]})"
            theirs = timed(lambda: proc(images=[load_image(uri)], return_tensors="np"))
            rows.append({"size": f"{w}x{h}", "format": fmt, "file_kib": round(len(buf.getvalue()) / 1024, 1),
                         "embtrt_ms": round(ours, 2) if isinstance(ours, float) else ours,
                         "transformers_ms": round(theirs, 2)})
            print(rows[-1], flush=True)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), platform.processor())
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"cpu": cpu, "rows": rows}, indent=2))
    lines = ["| size | format | file KiB | embtrt ms | transformers ms |", "|---|---|---|---|---|"]
    lines += [f"| {r['size']} | {r['format']} | {r['file_kib']} | {r['embtrt_ms']} | {r['transformers_ms']} |" for r in rows]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
