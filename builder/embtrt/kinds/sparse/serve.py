"""SparseClient: texts -> sparse vectors (SPLADE) over tritonclient gRPC (docs/sparse.md).

Each text's vector comes back as its active dimensions: (indices int64, values float32), equal
to SparseEncoder.encode_query / encode_document with the same options (input_type query or
document, prompt_name, truncate, max_active_dims).
"""

from __future__ import annotations

import numpy as np
from embtrt_backend.kinds import SPARSE

from ...errors import ClientError
from ...serve.client import KindClient
from ...serve.wire import text_input


class SparseClient(KindClient):
    KIND = SPARSE.name

    def __init__(self, url: str = "127.0.0.1:8001", model: str = "splade", **options) -> None:
        super().__init__(url, model, **options)

    @property
    def vocab(self) -> int:
        return int(self.parameters()["embtrt.dim"])

    def _infer(self, texts: list[str], params: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        def call():
            r = self._c.infer(self.model, [text_input(texts)], client_timeout=self.timeout_s, parameters=params or None)
            return r.as_numpy("SPARSE_INDICES"), r.as_numpy("SPARSE_VALUES"), r.as_numpy("TOKENS").reshape(-1)

        return self._retrying(call)

    def encode(self, texts: list[str], *, input_type: str | None = None, prompt_name: str | None = None,
               truncate: str | None = None, max_active_dims: int | None = None
               ) -> list[tuple[np.ndarray, np.ndarray]]:
        """[(indices, values)] per text, indices ascending: input_type query is encode_query,
        document (or passage) encode_document; max_active_dims keeps the K largest weights."""
        if isinstance(texts, str):
            raise ClientError("encode() takes a list of texts, got a single str", "wrap it: encode([text])")
        params = {k: v for k, v in {"input_type": input_type, "prompt_name": prompt_name, "truncate": truncate,
                                    "max_active_dims": max_active_dims}.items() if v is not None}
        bs = self.batch_size
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for i in range(0, len(texts), bs):
            idx, val, _ = self._infer(list(texts[i:i + bs]), params)
            for ix, v in zip(idx, val):
                keep = ix >= 0
                out.append((ix[keep], v[keep]))
        return out

    def encode_dense(self, texts: list[str], **options) -> np.ndarray:
        """The same vectors as dense float32 [texts, vocabulary] (for comparison and small batches)."""
        vecs = self.encode(texts, **options)
        out = np.zeros((len(vecs), self.vocab), dtype=np.float32)
        for i, (ix, v) in enumerate(vecs):
            out[i, ix] = v
        return out
