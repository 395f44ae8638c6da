"""The embedder: sentence-transformers' SentenceTransformer, one pooled vector per text."""

from ..base import TEXT, POOLED, POOLS, Kind

KIND = Kind(
    name="embedder", label="an embedder", reference="SentenceTransformer",
    operations=("embed", "token_vectors"), metric_route="embeddings",   # token_vectors: TEI's /embed_all
    served_routes="POST /v1/embeddings",
    client_hint="embed with EmbeddingClient / `embtrt embed`",
    front_door="router", input=TEXT, heads=(POOLED,), door="EmbedderDoor", torch_encoder="TorchEncoder",
    build="embtrt.kinds.embedder.export:build_embedder_in", gateway_model="embtrt.kinds.embedder.scale:Embedder",
    routing=POOLS, overflow=("truncate", "reject", "chunk"), client="embtrt.serve.client:EmbeddingClient",
    verify_cli="embtrt.kinds.embedder.cli:verify", bench_cli="embtrt.kinds.embedder.cli:bench",
    tune_trial="embtrt.kinds.embedder.measure_bench:tune_trial",
)
