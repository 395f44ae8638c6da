"""Small pieces every layer may import: resource folders, file helpers, the corpus, the
serving-side logic, GPU detection. Nothing here imports a higher layer of embtrt."""
