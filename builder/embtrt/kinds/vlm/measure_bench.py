"""`embtrt bench --vlm-images FOLDER` (docs/visual-documents.md): images/s of VLM embedders served over gRPC at each
concurrency, `per_request` encoded image files a request (the same files for every target), and the model card's
computation in process on the same images (transformers' load_image of each file as a data URI, the image processor's
PIL backend, one image at a time as the card computes it, fp32): what serving adds or saves against running the
reference yourself."""

from __future__ import annotations

from pathlib import Path

from embtrt_backend.kinds import VLM

from ...measure.image_load import served_image_rows
from ...measure.kind_measure import inprocess_row


def bench_vlm(url: str, models: list[str], images: list[bytes], concurrency: tuple[int, ...] = (1, 8),
              per_request: int = 1, requests: int = 100, warmup: int = 5, reference: Path | None = None,
              progress=lambda m: None, trust_remote_code: bool = False) -> list[dict]:
    """Rows of each (model, concurrency) in images/s; then the in-process computation where `reference` is given."""
    rows = served_image_rows(url, models, images, concurrency, per_request, requests, warmup, VLM.image_input,
                             ("EMBEDDING", "TOKENS"), "images", progress)
    if reference is not None:
        from transformers.image_utils import load_image

        from ...reference.images import data_uri
        from .reference import embed_one, load_reference

        ref = load_reference(reference, trust_remote_code)
        body = [[data_uri(x, "png")] for x in images[:max(1, min(len(images), requests * per_request))]]
        run = lambda call: embed_one(ref, None, load_image(call[0]))   # noqa: E731
        run(body[0])   # warm
        progress(f"in process: the model card's computation on {len(body)} images, one at a time")
        rows.append(inprocess_row("inprocess:the model card's computation (processor's PIL images, one at a time, fp32)",
                                  {"images_per_request": 1, "concurrency": 1}, run, body, 1, "images", passes=1, p50=True))
    return rows
