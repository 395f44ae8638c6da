"""The gateway's HTTP surface, one literal table: (method, path, operation, dialect), read at a glance.

The operation is what a served model does for the route (`embed`, `rank`, ...: the gateway's parts, ops/) or
the gateway's own (`models`, `ready`, ...); the dialect is the API shape its body, response and errors speak
(dialects/, a module per API family, holding its shape of each operation). Which kinds serve a route follows
from their `Kind.operations`; docs/scale-out.md's table of the anchors' routes is checked against this one
(tests/unit/test_routes.py), and operations() refuses to start where an operation has no route here, a route
here names an operation that does not exist, or a route's dialect has no shape of its operation."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    operation: str
    dialect: str


R = Route
ROUTES: tuple[Route, ...] = (
    # embed: OpenAI, infinity, TEI, Cohere (NIM's and images' bodies on /v1/embeddings)
    R("POST", "/v1/embeddings", "embed", "openai"),
    R("POST", "/embeddings", "embed", "openai"),
    R("POST", "/embed", "embed", "tei"),
    R("POST", "/similarity", "embed", "tei-similarity"),
    R("POST", "/v1/embed", "embed", "cohere-v1"),
    R("POST", "/v2/embed", "embed", "cohere-v2"),
    # rank: Cohere / Jina / vLLM, TEI, NIM, vLLM's score API
    R("POST", "/v1/rerank", "rank", "cohere"),
    R("POST", "/v2/rerank", "rank", "cohere"),
    R("POST", "/rerank", "rank", "tei"),
    R("POST", "/v1/ranking", "rank", "nim"),
    R("POST", "/score", "rank", "vllm-score"),
    R("POST", "/v1/score", "rank", "vllm-score"),
    # embed_sparse: embtrt's own, TEI
    R("POST", "/v1/sparse", "embed_sparse", "embtrt"),
    R("POST", "/embed_sparse", "embed_sparse", "tei"),
    # classify: TEI, vLLM
    R("POST", "/predict", "classify", "tei"),
    R("POST", "/classify", "classify", "vllm"),
    # token_vectors: TEI, vLLM's pooling; encode: FlagEmbedding's outputs
    R("POST", "/embed_all", "token_vectors", "tei-all"),
    R("POST", "/pooling", "token_vectors", "vllm-pooling"),
    R("POST", "/v1/encode", "encode", "embtrt"),
    # tokenize: every model (TEI, vLLM)
    R("POST", "/tokenize", "tokenize", "tei-text"),
    R("POST", "/decode", "tokenize", "tei-text"),
    R("POST", "/detokenize", "tokenize", "vllm"),
    # the gateway's own
    R("GET", "/v1/models", "models", "openai"),
    R("GET", "/v1/models/{id}", "models", "openai"),    # openai's models.retrieve
    R("GET", "/health/live", "live", "embtrt"),
    R("GET", "/health/ready", "ready", "embtrt"),
    R("GET", "/health", "ready", "tei"),                # TEI's health checks
    R("GET", "/ping", "ready", "tei"),
    R("GET", "/", "ready", "tei"),
    R("POST", "/", "root", "tei"),                      # TEI's route of its model (anchors.Root)
    R("GET", "/info", "info", "tei"),
    R("GET", "/v1/health/ready", "ready", "nim"),
    R("GET", "/v1/health/live", "live", "nim"),
    R("GET", "/v1/metadata", "info", "nim"),
    R("GET", "/metrics", "metrics", "prometheus"),
    R("GET", "/v1/metrics", "metrics", "nim"),
    R("GET", "/openapi.json", "openapi", "embtrt"),     # the routes answered (openapi.py), and as a page
    R("GET", "/docs", "openapi", "embtrt"),
)
del R

# the gateway's own operations (http.py's handlers), not a model's
OWN_OPERATIONS = frozenset({"models", "live", "ready", "root", "info", "metrics", "openapi"})


_DIALECTS = {(r.method, r.path): r.dialect for r in ROUTES}   # looked up per request by the parsers


@cache
def routes_of(operation: str) -> dict[str, str]:
    """The operation's POST paths, each with its dialect, in the table's order (do not modify: shared)."""
    return {r.path: r.dialect for r in ROUTES if r.operation == operation and r.method == "POST"}


def dialect_of(path: str, method: str = "POST") -> str:
    """The dialect of one route; KeyError for a route not in the table."""
    return _DIALECTS[(method, path)]
