"""A small OpenAI-compatible /v1/embeddings server for bench tests (run as a subprocess).

Vectors are deterministic functions of the text (not a model): the bench measures load,
not quality. A text containing FAIL gets HTTP 500, to test error accounting.

    python tests/openai_peer.py PORT
"""

import hashlib
import sys

import numpy as np
from aiohttp import web


async def embeddings(request: web.Request) -> web.Response:
    body = await request.json()
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    if any("FAIL" in t for t in texts):
        return web.json_response({"error": {"message": "forced failure"}}, status=500)
    data = []
    for i, t in enumerate(texts):
        seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little")
        v = np.random.default_rng(seed).standard_normal(8)
        data.append({"object": "embedding", "index": i, "embedding": (v / np.linalg.norm(v)).tolist()})
    return web.json_response({"object": "list", "data": data, "model": body.get("model", "")})


if __name__ == "__main__":
    app = web.Application()
    app.router.add_post("/v1/embeddings", embeddings)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=lambda *a: print("ready", flush=True))
