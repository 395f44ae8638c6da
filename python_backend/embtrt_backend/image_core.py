"""The image input's core (every kind whose input takes images: the text-and-image embedder, the page-image
retriever): each request's encoded files -> `pixel_values`
(embtrt_backend.images: decoded upright and RGB as transformers' load_image, preprocessed as the model's
image processor with its PIL backend) -> the image tower, in runs of at most its max batch, several
requests' images together -> each request's outputs with its options applied (a pooled vector's width and type; a page's token
vectors), as the text side's request core does for texts.

A request's images are decoded when it is parsed (a bad one refuses that request only, naming its row),
on a few threads (Pillow's decoders and resize release the GIL); only the preprocessed arrays wait for the
tower: 3 x 224 x 224 float32, 602 KB per image for a 224-pixel model."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import InputError
from .images import ImageLimits, ProcessorConfig, load, opened, pixel_values
from .options import RequestOptions

PROCESSOR_FILE = "image_processor.json"   # the model's image processor settings, in the front door's folder
DECODE_THREADS = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1))


@dataclass
class ImageRequest:
    pixels: np.ndarray            # [rows, 3, H, W] float32
    options: RequestOptions


@dataclass
class ImageOutcome:
    vectors: np.ndarray | None = None
    tokens: np.ndarray | None = None   # zeros: an image takes no text tokens (usage counts text tokens)
    error: Exception | None = None


class ImageCore:
    def __init__(self, processor: ProcessorConfig, limits: ImageLimits, max_batch: int) -> None:
        self.processor, self.limits, self.max_batch = processor, limits, max(1, max_batch)

    @classmethod
    def from_folder(cls, folder: str, p: dict[str, str]) -> "ImageCore":
        with open(os.path.join(folder, PROCESSOR_FILE), encoding="utf-8") as f:
            processor = ProcessorConfig.from_dict(json.load(f))
        limits = ImageLimits.from_parameters(p)
        return cls(processor, limits, int(p.get("image_max_batch", "8")))

    def one(self, img, row: int) -> np.ndarray:
        """One opened image -> its pixel_values [3, H, W], or the InputError naming its row; its decoded buffers
        closed at once (a request's other images must not keep them: one full-size buffer per decode thread)."""
        try:
            return pixel_values(load(img, row), self.processor, self.limits, row)
        finally:
            img.close()

    def prepare(self, files: list[bytes], options: RequestOptions) -> ImageRequest:
        """A request's encoded files -> its ImageRequest (read_images: every header bounded first, then decoded); the
        first bad file's InputError (by row) refuses the request."""
        return ImageRequest(np.stack(read_images(files, self.limits, self.one)), options)

    def run(self, requests: list[ImageRequest], tower, finish) -> list[ImageOutcome]:
        """Every request's images through `tower` (feeds -> [rows, dim]) in runs of at most max_batch rows;
        `finish(vectors, options)` applies a request's options. A tower failure is each request's error."""
        if not requests:
            return []
        pixels = np.concatenate([r.pixels for r in requests]) if len(requests) > 1 else requests[0].pixels
        try:
            out = np.concatenate([np.asarray(tower({"pixel_values": pixels[a:a + self.max_batch]}), dtype=np.float32)
                                  for a in range(0, len(pixels), self.max_batch)])
        except Exception as exc:  # noqa: BLE001 (each request's INTERNAL error)
            return [ImageOutcome(error=exc) for _ in requests]
        outs, start = [], 0
        for r in requests:
            n = len(r.pixels)
            try:
                outs.append(ImageOutcome(finish(out[start:start + n], r.options), np.zeros(n, np.int64)))
            except InputError as exc:
                outs.append(ImageOutcome(error=exc))
            start += n
        return outs


def header(data: bytes, limits: ImageLimits, row: int):
    """One encoded file's header (nothing decoded), or the InputError naming its row."""
    if not isinstance(data, (bytes, bytearray)) or not data:
        raise InputError(f"row {row}: an empty image", "input", row)
    return opened(bytes(data), limits, row)


_POOL: ThreadPoolExecutor | None = None


def read_images(files: list[bytes], limits: ImageLimits, one: Callable[[Any, int], Any]) -> list:
    """A request's encoded files -> `one(header, row)` of each, in order: every header read first (the formats, each
    image's and the request's pixels bounded before anything decodes), then the images decoded (`one` decodes,
    preprocesses and closes its image) on a few threads (Pillow's decoders and resize release the GIL); the first bad
    file's InputError (by row) refuses the request."""
    global _POOL
    heads = [header(f, limits, k) for k, f in enumerate(files)]
    total = sum(h.size[0] * h.size[1] for h in heads)
    if total > limits.max_request_pixels:
        raise InputError(f"the request's {len(files)} images hold {total} pixels, over the limit of "
                         f"{limits.max_request_pixels} per request: send them in several requests", "input")
    if len(heads) == 1:
        return [one(heads[0], 0)]
    if _POOL is None:
        _POOL = ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="embtrt-decode")
    return list(_POOL.map(one, heads, range(len(heads))))


def dynamic_patches(processor, img, row: int) -> tuple[np.ndarray, np.ndarray]:
    """One opened image decoded (upright, RGB) and through a dynamic-resolution processor (Qwen2-VL's, PIL backend)
    -> (its patches [n, patch dim], its grid [t, h, w]); closed at once; the processor's own refusal (an aspect ratio
    over 200) the InputError naming its row."""
    try:
        out = processor(images=[load(img, row)], return_tensors="np")
    except ValueError as exc:
        raise InputError(f"row {row}: the image processor refuses it: {exc}", "input", row) from None
    finally:
        img.close()
    return np.asarray(out["pixel_values"], np.float32), np.asarray(out["image_grid_thw"][0], np.int64)


def one_modality(arrays: dict, image: str, apart: str) -> tuple[str, np.ndarray]:
    """The one input a request of a kind taking texts or images carries, ("TEXT", rows) or (`image`, rows): Triton gives
    every input of a request the same batch size, so a request is texts or images; both, neither, or no rows are the
    request's InputError (`apart`: how to send both)."""
    text, files = arrays.get("TEXT"), arrays.get(image)
    if text is not None and files is not None:
        raise InputError(f"a request carries TEXT or {image}, not both: {apart}")
    if text is None and files is None:
        raise InputError(f"the request has no TEXT and no {image} input")
    name, rows = ("TEXT", text) if files is None else (image, files)
    if not rows.size:
        raise InputError(f"{name} holds no rows")
    return name, rows
