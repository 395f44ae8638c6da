"""The sparse encoder (SPLADE, sentence-transformers SparseEncoder): its build, reference and gate,
gRPC client, verify and bench, and gateway model and request shapes (docs/sparse.md)."""
