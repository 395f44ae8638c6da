"""The reranker: sentence-transformers' CrossEncoder, a score (or a score per label) per (query, document) pair."""

from ..base import Kind

KIND = Kind(
    name="reranker", label="a reranker", reference="CrossEncoder",
    operations=("rank", "classify"), metric_route="rerank",   # classify: TEI's /predict on pairs, as TEI serves rerankers
    served_routes="POST /v1/rerank (Cohere, Jina, vLLM), /v2/rerank, /rerank (TEI) or /v1/ranking (NIM)",
    client_hint="rank with RerankClient / `embtrt rerank` (docs/rerankers.md)",
    front_door="router", inputs=("QUERY", "DOCUMENT"), probe_output="SCORES", door="RerankerDoor", torch_encoder="TorchClassifier",
    encoder_output="logits",
    build="embtrt.kinds.reranker.export:build_reranker_in", spec_fields="embtrt.kinds.reranker.export:spec_fields",
    gateway_model="embtrt.kinds.reranker.scale:Reranker",
    measure="embtrt.kinds.reranker.measure:RerankMeasure",
    gateway_operations="embtrt.kinds.reranker.scale_routes:OPERATIONS",
    plan_check="embtrt.kinds.reranker.reference_gate:plan_check",
    cli="embtrt.kinds.reranker.cli",
)
