"""The reranker (sentence-transformers CrossEncoder): its build, reference and gate, gRPC client,
verify and bench, and gateway model and request shapes (docs/rerankers.md)."""
