"""GET /openapi.json and GET /docs: the routes this gateway answers, from the route table (one source:
route_table.ROUTES), each with its dialect, its operation and where the anchor documents its body. /docs is
a plain HTML page of the same (no scripts: it works where nothing can be fetched)."""

from __future__ import annotations

import html


# where each dialect family's request and response bodies are documented
ANCHOR_DOCS = {
    "openai": "https://platform.openai.com/docs/api-reference",
    "tei": "https://huggingface.github.io/text-embeddings-inference/",
    "cohere": "https://docs.cohere.com/reference/about",
    "vllm": "https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html",
    "nim": "https://docs.nvidia.com/nim/",
    "embtrt": "docs/scale-out.md",
    "prometheus": "https://prometheus.io/docs/instrumenting/exposition_formats/",
}
ERRORS = {"400": "bad request (the route's dialect's error body)", "401": "API key missing or wrong",
          "404": "unknown model", "413": "over a size limit", "422": "invalid (TEI's routes)",
          "429": "at capacity (Retry-After)", "503": "servers unavailable (Retry-After)"}


def _family(dialect: str) -> str:
    for f in ("tei", "cohere", "vllm", "nim", "prometheus", "embtrt"):
        if dialect.startswith(f):
            return f
    return "openai"


def document(gw, version: str) -> dict:
    """The OpenAPI 3.1 description of the routes `answered` lists."""
    paths: dict[str, dict] = {}
    for r in gw.answered_routes():
        fam = _family(r.dialect)
        op: dict = {"operationId": f"{r.method.lower()}_{r.path.strip('/').replace('/', '_').replace('{', '').replace('}', '') or 'root'}",
                    "tags": [r.operation], "summary": f"{r.operation} ({r.dialect} dialect)",
                    "externalDocs": {"url": ANCHOR_DOCS[fam]},
                    "responses": {"200": {"description": "the answer in the dialect's shape"}}}
        if r.method == "POST":
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": {
                "type": "object", "description": f"the {r.dialect} dialect's body (see externalDocs); models: "
                                                 + ", ".join(gw.models)}}}}
            op["responses"].update({k: {"description": v} for k, v in ERRORS.items()})
        if "{" in r.path:
            op["parameters"] = [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}]
        paths.setdefault(r.path, {})[r.method.lower()] = op
    return {"openapi": "3.1.0", "info": {"title": "embtrt gateway", "version": version,
                                         "description": "OpenAI-, TEI-, Cohere-, vLLM-, NIM- and infinity-compatible "
                                                        "routes in front of Triton; models: " + ", ".join(gw.models)},
            "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}, "paths": paths}


def page(gw, version: str) -> str:
    """/docs: the same routes as an HTML table."""
    rows = "".join(f"<tr><td>{r.method}</td><td><code>{html.escape(r.path)}</code></td><td>{r.operation}</td>"
                   f"<td><a href=\"{ANCHOR_DOCS[_family(r.dialect)]}\">{r.dialect}</a></td></tr>" for r in gw.answered_routes())
    models = html.escape(", ".join(gw.models))
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>embtrt gateway</title></head><body>"
            f"<h1>embtrt gateway {html.escape(version)}</h1><p>Models: {models}. Machine-readable: "
            f"<a href=\"/openapi.json\">/openapi.json</a>.</p><table border=\"1\" cellpadding=\"4\">"
            f"<tr><th>method</th><th>path</th><th>operation</th><th>dialect</th></tr>{rows}</table></body></html>")
