"""`embtrt bench --images FOLDER` (docs/images.md): images/s of text-and-image models served over gRPC at each
concurrency, `per_request` encoded files a request (the same files for every target), and
`SentenceTransformer.encode` in process on the same images given as data URIs (its own decode and
preprocessing, batch 32, fp32): what serving adds or saves against running the reference yourself."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from ...measure.kind_measure import inprocess_row, load_row, warm_then_load
from ...reference.images import image_files  # noqa: F401 (the image input's, shared)

async def _trial(url: str, model: str, reqs: list[list[bytes]], warmup: int, conc: int):
    import tritonclient.grpc.aio as aioclient

    from ...serve.wire import outputs, text_input

    async with aioclient.InferenceServerClient(url) as c:
        async def one(i: int) -> None:
            await c.infer(model, [text_input(reqs[i], "IMAGE")], outputs=outputs("EMBEDDING"), client_timeout=300)
        return await warm_then_load(one, len(reqs), warmup, conc)


def bench_images(url: str, models: list[str], images: list[bytes], concurrency: tuple[int, ...] = (1, 32),
                 per_request: int = 1, requests: int = 100, warmup: int = 5, reference: Path | None = None,
                 progress=lambda m: None, trust_remote_code: bool = False) -> list[dict]:
    """Rows of each (model, concurrency) in images/s; then the in-process reference where `reference` is given."""
    rows = []
    for conc in concurrency:
        rng = random.Random(conc)
        reqs = [[rng.choice(images) for _ in range(per_request)] for _ in range(requests + warmup)]
        for target in models:
            name, _, at = target.partition("@")
            u = at or url
            progress(f"{name}@{u}: {per_request} images per request at concurrency {conc}")
            load = asyncio.run(_trial(u, name, reqs, warmup, conc))
            rows.append(load_row(f"triton:{name}@{u}", {"images_per_request": per_request, "concurrency": conc}, load,
                                 "images", per_request))
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
