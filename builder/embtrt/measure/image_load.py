"""The image input's bench load (`embtrt bench --images`, `--pages`): each model served over gRPC at each concurrency,
`per_request` encoded files a request (the same seeded picks for every target), warm-up first -> one row per
(model, concurrency) in images/s."""

from __future__ import annotations

import asyncio
import random

from .kind_measure import load_row, warm_then_load


async def _trial(url: str, model: str, reqs: list[list[bytes]], warmup: int, conc: int, image_input: str,
                 outputs: tuple[str, ...]):
    import tritonclient.grpc.aio as aioclient

    from ..serve.wire import outputs as wanted, text_input

    async with aioclient.InferenceServerClient(url) as c:
        async def one(i: int) -> None:
            await c.infer(model, [text_input(reqs[i], image_input)], outputs=wanted(*outputs), client_timeout=300)
        return await warm_then_load(one, len(reqs), warmup, conc)


def served_image_rows(url: str, models: list[str], images: list[bytes], concurrency: tuple[int, ...], per_request: int,
                      requests: int, warmup: int, image_input: str, outputs: tuple[str, ...], noun: str,
                      progress=lambda m: None) -> list[dict]:
    """Rows of each (model[@HOST:PORT], concurrency) in images/s: `requests` measured requests after `warmup`."""
    rows = []
    for conc in concurrency:
        rng = random.Random(conc)
        reqs = [[rng.choice(images) for _ in range(per_request)] for _ in range(requests + warmup)]
        for target in models:
            name, _, at = target.partition("@")
            u = at or url
            progress(f"{name}@{u}: {per_request} {noun} per request at concurrency {conc}")
            load = asyncio.run(_trial(u, name, reqs, warmup, conc, image_input, outputs))
            rows.append(load_row(f"triton:{name}@{u}", {"images_per_request": per_request, "concurrency": conc}, load,
                                 "images", per_request))
    return rows
