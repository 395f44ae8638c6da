"""The reranker: sentence-transformers' CrossEncoder, a score (or a score per label) per (query, document) pair."""

from ..base import PAIR, SCORES, Kind

KIND = Kind(
    name="reranker", label="a reranker", reference="CrossEncoder",
    operations=("rank", "classify"), metric_route="rerank",   # classify: TEI's /predict on pairs, as TEI serves rerankers
    served_routes="POST /v1/rerank (Cohere, Jina, vLLM), /v2/rerank, /rerank (TEI) or /v1/ranking (NIM)",
    client_hint="rank with RerankClient / `embtrt rerank` (docs/rerankers.md)",
    front_door="router", input=PAIR, heads=(SCORES,), door="RerankerDoor", torch_encoder="TorchClassifier",
    encoder_output="logits",
    build="embtrt.kinds.reranker.export:build_reranker_in", spec_fields="embtrt.kinds.reranker.export:spec_fields",
    gateway_model="embtrt.kinds.reranker.scale:Reranker",
    measure="embtrt.kinds.reranker.measure:RerankMeasure",
    cli="embtrt.kinds.reranker.cli", client="embtrt.kinds.reranker.serve:RerankClient",
    bench_cli="embtrt.kinds.reranker.cli:bench", bench_flag="--rerank-documents",
)
