"""The gateway's per-request operation path in process, without a server: one-text POST /v1/embeddings bodies
parsed and answered through the embed operation's row (`operations()["embed"]`: parse, then answer against a
stand-in model that returns a vector at once), microseconds per request, the minimum of 9 repeats of 10,000.
It measures what the operation rows and the dialects' shapes add, not HTTP, JSON or the model.

    PYTHONPATH=BASE/builder:BASE/python_backend .venv/bin/python benchmarks/gateway_parse.py base
    PYTHONPATH=HEAD/builder:HEAD/python_backend .venv/bin/python benchmarks/gateway_parse.py head

(`git worktree add BASE <commit>`, and HEAD likewise: run both sides from worktrees, since the installed
checkout measured slower than a worktree of the same code; alternate the two a few times and compare minima:
a shared VM's neighbours move single runs by 50%.) Works on trees from before and after the move of the request shapes
to scale/gateway/ops and dialects (631d60c)."""

import asyncio
import sys
import timeit
from types import SimpleNamespace

import numpy as np
from embtrt_backend.kinds import EMBEDDER
from embtrt_backend.options import ModelOptions

import embtrt.scale.gateway.operations as ops

try:
    from embtrt.scale.gateway.ops.embed import EmbeddingsModel
except ImportError:   # before 631d60c
    from embtrt.kinds.embedder.scale_schema import EmbeddingsModel  # type: ignore[no-redef]

MODELS = {"mini": EmbeddingsModel(ModelOptions(dim=384, normalize=True, prompts={}), 30522, 512, 1 << 20)}
KINDS = {"mini": EMBEDDER}
CFG = SimpleNamespace(max_items=2048, default_model=None)
BODY = {"model": "mini", "input": ["a query of some words " * 20]}
VECTOR = np.ones((1, 384), np.float32)


class StandIn:
    async def embed(self, texts, ids, opts):
        return VECTOR, 100


async def requests(op, model, n: int) -> None:
    for _ in range(n):
        await op.answer(model, op.parse(MODELS, KINDS, CFG, "/v1/embeddings", BODY))


def main() -> None:
    op, model, loop, n = ops.operations()["embed"], StandIn(), asyncio.new_event_loop(), 10_000
    best = min(timeit.repeat(lambda: loop.run_until_complete(requests(op, model, n)), number=1, repeat=9))
    print(f"{sys.argv[1] if len(sys.argv) > 1 else 'tree'}: {best / n * 1e6:.2f} us per parse+answer (min of 9 x {n})")


if __name__ == "__main__":
    main()
