"""#73: GET /openapi.json and /docs describe the routes the gateway answers, from the route table: a
fused-pooling embedder's gateway lists /v1/embeddings and its own GET routes, not /embed_all or a
reranker's routes. The gateway's ASGI app called in process (no server: nothing is inferred)."""

import asyncio

import httpx

from embtrt.scale.gateway.config import GatewayConfig
from embtrt.scale.gateway.http import GatewayApp


def _get(app, path: str) -> httpx.Response:
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            return await c.get(path)
    return asyncio.run(go())


def test_openapi_lists_the_routes_answered_and_docs_shows_them(minilm_repo):
    app = GatewayApp(GatewayConfig(repository=minilm_repo, triton="127.0.0.1:1"))
    r = _get(app, "/openapi.json")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["openapi"].startswith("3.1") and "all_minilm_l6_v2" in doc["info"]["description"]
    paths = doc["paths"]
    assert {"/v1/embeddings", "/embed", "/v1/embed", "/tokenize", "/v1/models", "/health", "/openapi.json"} <= set(paths)
    assert not {"/embed_all", "/pooling", "/v1/rerank", "/predict", "/v1/sparse"} & set(paths), sorted(paths)
    post = paths["/v1/embeddings"]["post"]
    assert post["tags"] == ["embed"] and "requestBody" in post and "429" in post["responses"]
    assert "openai" in post["externalDocs"]["url"] and paths["/embed"]["post"]["externalDocs"]["url"].startswith(
        "https://huggingface.github.io/text-embeddings-inference")
    page = _get(app, "/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<code>/v1/embeddings</code>" in page.text and "/embed_all" not in page.text
