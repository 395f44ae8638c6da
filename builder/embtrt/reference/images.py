"""The image input's reference data (every kind whose input takes images): the gates' seeded images, drawn shapes
and gradients on noise in sizes from 40 to 400 pixels a side, as PNG, JPEG, WebP and GIF, an RGBA and a
grayscale one among them; an encoded file as a data URI (the form sentence-transformers' encode reads); a
folder's image files (the benches')."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np


def data_uri(data: bytes, fmt: str) -> str:
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(data).decode("ascii")


def gate_images(count: int = 16, seed: int = 53) -> list[tuple[bytes, str]]:
    """`count` seeded images as encoded files (bytes, format), each different in content, size and format."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    formats = ("PNG", "JPEG", "WEBP", "GIF")
    out = []
    for i in range(count):
        w, h = int(rng.integers(40, 400)), int(rng.integers(40, 400))
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([(xx * rng.uniform(0.2, 2) + yy * rng.uniform(0, 1)) % 256,
                         (yy * rng.uniform(0.2, 2)) % 256, np.full((h, w), rng.uniform(0, 255))], -1)
        noisy = np.clip(base + rng.normal(0, 24, base.shape), 0, 255).astype(np.uint8)
        img = Image.fromarray(noisy, "RGB")
        draw = ImageDraw.Draw(img)
        for _ in range(int(rng.integers(1, 5))):
            x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
            box = (x0, y0, x0 + int(rng.integers(5, w)), y0 + int(rng.integers(5, h)))
            fill = tuple(int(c) for c in rng.integers(0, 256, 3))
            (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=fill)
        fmt = formats[i % len(formats)]
        if i == 5:
            img = img.convert("L")
        if i == 6:
            fmt, img = "PNG", img.convert("RGBA")
            img.putalpha(Image.fromarray((np.arange(w)[None, :].repeat(h, 0) * 255 // max(1, w - 1)).astype(np.uint8)))
        buf = io.BytesIO()
        img.save(buf, format=fmt, **({"quality": 90} if fmt in ("JPEG", "WEBP") else {}))
        out.append((buf.getvalue(), fmt))
    return out


SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp")


def image_files(folder: Path) -> list[bytes]:
    """The encoded images of a folder (sorted by name)."""
    files = sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in SUFFIXES and p.is_file())
    if not files:
        raise FileNotFoundError(f"no image files ({', '.join(SUFFIXES)}) in {folder}")
    return [p.read_bytes() for p in files]
