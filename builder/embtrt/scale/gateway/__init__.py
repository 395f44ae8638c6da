"""`embtrt gateway`: OpenAI's /v1/embeddings in front of length pools of tritonservers.

Every input is tokenized here with the served tokenizer.json, so token counts are exact
(usage, routing) and over-long texts are refused up front. Where all of a model's buckets
are in one pool (one server, or replicas of it), texts go to the model's front door
(`--route frontdoor`, the default there): it tokenizes, routes and batches as a direct
call does, and the gateway adds only its HTTP work (measured in benchmarks/README.md).
With length pools each item goes to the pool of the smallest bucket that holds it, as
token ids to that bucket's encoder (`--route ids`; `--route text` sends text to the
`NAME_<L>` ensembles instead). Rows of concurrent requests are coalesced into one upstream
call, round robin over a pool's replicas, retried on another replica when one is
unavailable or its queue is full. Results come back in input order.

Token-id input (`input` as a list of ints, or of lists of ints) takes the model's own ids
as its tokenizer.json produces them, special tokens included, and must fit the max length.

Rerankers (a repository whose manifest says `kind: reranker`) are served on POST /v1/rerank and
/v2/rerank (Cohere, Jina, vLLM), /rerank (TEI) and /v1/ranking (NIM), one semantics behind the three
shapes: the pairs go to the reranker's front door, which scores them as `CrossEncoder.predict` does
(docs/rerankers.md). Embedders and rerankers can share one gateway.

Sparse encoders (SPLADE; `kind: sparse`) are served on POST /embed_sparse (TEI) and /v1/sparse: the
texts go to the sparse encoder's front door, which encodes them as `SparseEncoder.encode_query` /
`encode_document` do (docs/sparse.md). Every kind can share one gateway.

Modules, one job each: config (GatewayConfig, --pool, pools), errors (ApiError, OpenAI's error
envelope), embeddings_schema (the /v1/embeddings body parsed and validated, pure), rerank_schema (the
rerank APIs' bodies parsed and their responses rendered, pure), sparse_schema (the same for the sparse
routes), served (what the gateway knows of a repository), embed (the embedding algorithm of one
model), rerank (the reranking of one model), sparse (the sparse encoding of one model),
coalescer (PoolBatcher), upstream (gRPC clients, retries over a pool's replicas), registry (several
models, /v1/models), metrics (Prometheus), http (the ASGI app, `run`).
"""

from .coalescer import PoolBatcher
from .config import MAX_ITEMS, ROUTES, GatewayConfig, Pool, model_pools, parse_pool
from .embed import Gateway
from .embeddings_schema import EmbeddingsModel, EmbeddingsRequest, parse_embeddings, resolve_model
from .errors import ApiError
from .http import GatewayApp, create_app, run
from .metrics import Metrics
from .registry import MultiGateway
from .rerank import Reranker
from .rerank_schema import RerankModel, RerankRequest, parse_rerank
from .served import Served, ServedReranker, ServedSparse
from .sparse import Sparse
from .sparse_schema import SparseModel, SparseRequest, parse_sparse
from .upstream import Upstream

__all__ = ["MAX_ITEMS", "ROUTES", "ApiError", "EmbeddingsModel", "EmbeddingsRequest", "Gateway", "GatewayApp",
           "GatewayConfig", "Metrics", "MultiGateway", "Pool", "PoolBatcher", "RerankModel", "RerankRequest", "Reranker",
           "Served", "ServedReranker", "ServedSparse", "Sparse", "SparseModel", "SparseRequest", "Upstream",
           "create_app", "model_pools", "parse_embeddings", "parse_pool", "parse_rerank", "parse_sparse",
           "resolve_model", "run"]
