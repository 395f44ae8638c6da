"""The embedder (sentence-transformers SentenceTransformer, or a transformers folder with its
pooling): its build, verify and bench, and gateway model and request shapes (docs/api.md)."""
