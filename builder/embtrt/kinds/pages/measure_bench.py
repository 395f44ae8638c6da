"""`embtrt bench --pages FOLDER` (docs/visual-documents.md): images/s (page images) of page-image retrievers served over gRPC at each
concurrency, `per_request` encoded page files a request (the same files for every target), and ColPaliForRetrieval in
process on the same pages (transformers' load_image of each file as a data URI, the processor's PIL backend, batch 8,
fp32): what serving adds or saves against running the reference yourself."""

from __future__ import annotations

from pathlib import Path

from embtrt_backend.kinds import PAGES

from ...measure.image_load import served_image_rows
from ...measure.kind_measure import inprocess_row

INPROCESS_BATCH = 8


def bench_pages(url: str, models: list[str], pages: list[bytes], concurrency: tuple[int, ...] = (1, 8),
                per_request: int = 1, requests: int = 100, warmup: int = 5, reference: Path | None = None,
                progress=lambda m: None, trust_remote_code: bool = False) -> list[dict]:
    """Rows of each (model, concurrency) in pages/s; then the in-process reference where `reference` is given."""
    rows = served_image_rows(url, models, pages, concurrency, per_request, requests, warmup, PAGES.image_input,
                             ("TOKEN_EMBEDDINGS", "TOKEN_COUNTS"), "page images", progress)
    if reference is not None:
        from transformers.image_utils import load_image

        from ...reference.images import data_uri
        from .reference import encode_images, load_reference

        ref = load_reference(reference, trust_remote_code)
        body = [data_uri(x, "png") for x in pages[:max(1, min(len(pages), requests * per_request))]]
        calls = [body[i:i + INPROCESS_BATCH] for i in range(0, len(body), INPROCESS_BATCH)]
        run = lambda call: encode_images(ref, [load_image(u) for u in call])   # noqa: E731
        run(calls[0])   # warm
        progress(f"in process: {type(ref.model).__name__} on {len(body)} pages (batch {INPROCESS_BATCH})")
        rows.append(inprocess_row(f"inprocess:{type(ref.model).__name__}(processor's PIL pages, batch {INPROCESS_BATCH}, fp32)",
                                  {"images_per_request": INPROCESS_BATCH, "concurrency": 1}, run, calls, 1, "images",
                                  passes=1))
    return rows
