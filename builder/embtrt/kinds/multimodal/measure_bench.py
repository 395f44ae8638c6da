"""`embtrt bench --images FOLDER` (docs/images.md): images/s of text-and-image models served over gRPC at each
concurrency, `per_request` encoded files a request (the same files for every target), and
`SentenceTransformer.encode` in process on the same images given as data URIs (its own decode and
preprocessing, batch 32, fp32): what serving adds or saves against running the reference yourself."""

from __future__ import annotations

from pathlib import Path

from embtrt_backend.kinds import MULTIMODAL

from ...measure.image_load import served_image_rows
from ...measure.kind_measure import inprocess_row
from ...reference.images import image_files  # noqa: F401 (the image input's, shared)

def bench_images(url: str, models: list[str], images: list[bytes], concurrency: tuple[int, ...] = (1, 32),
                 per_request: int = 1, requests: int = 100, warmup: int = 5, reference: Path | None = None,
                 progress=lambda m: None, trust_remote_code: bool = False) -> list[dict]:
    """Rows of each (model, concurrency) in images/s; then the in-process reference where `reference` is given."""
    rows = served_image_rows(url, models, images, concurrency, per_request, requests, warmup, MULTIMODAL.image_input,
                             ("EMBEDDING",), "images", progress)
    if reference is not None:
        from .reference import data_uri, load_reference

        model = load_reference(reference, trust_remote_code)
        body = [data_uri(x, "png") for x in images[:max(1, min(len(images), requests * per_request))]]
        calls = [body[i:i + 32] for i in range(0, len(body), 32)]
        run = lambda call: model.encode(call, batch_size=32, convert_to_numpy=True)   # noqa: E731
        run(calls[0])   # warm
        progress(f"in process: SentenceTransformer.encode of {len(body)} images (batch 32)")
        rows.append(inprocess_row("inprocess:SentenceTransformer.encode(images as data URIs, batch 32, fp32)",
                                  {"images_per_request": 32, "concurrency": 1}, run, calls, 1, "images", passes=1))
    return rows
