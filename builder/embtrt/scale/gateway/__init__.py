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
envelope), served (what the gateway knows of a repository), model (GatewayModel, the one gateway
model class of every kind: its pools, the front door's calls, readiness, its /v1/models entry), and its
routing parts, by the kind's Kind.routing: front_door (Door: every request to the front door, which plans
every bucket) and length_pools (LengthPools: texts to the front door or token ids to the buckets' encoders,
coalesced), coalescer (PoolBatcher), upstream (gRPC clients,
retries over a pool's replicas), registry (several models, /v1/models), route_table, routes and operations
(the one literal table and what each operation runs), ops/ (the operations: each one's request, model record
and what it asks a model), dialects/ (one module per API family: its shape of every operation it has, parsed
and rendered, pure, and its error body), metrics (Prometheus), http (the ASGI app, `run`). A kind's subclass of
GatewayModel lives in its package (embtrt.kinds.<kind>.scale: what it sends and gets back, and the methods of
its operations: an embedder's vectors and token vectors, a reranker's pairs, ...).
"""
