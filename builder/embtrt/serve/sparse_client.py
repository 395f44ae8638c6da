"""SparseClient: texts -> sparse vectors (SPLADE) over tritonclient gRPC (docs/sparse.md).

Each text's vector comes back as its active dimensions: (indices int64, values float32), equal
to SparseEncoder.encode_query / encode_document with the same options (input_type query or
document, prompt_name, truncate, max_active_dims).
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import ClientError
from .client import _failure
from .wire import backoff, retryable, text_input


class SparseClient:
    def __init__(self, url: str = "127.0.0.1:8001", model: str = "splade", *, batch_size: int | None = None,
                 timeout_s: float = 60.0, retries: int = 4, backoff_s: float = 0.05) -> None:
        import tritonclient.grpc as grpcclient

        self.url, self.model = url, model
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._c = grpcclient.InferenceServerClient(url)
        self._batch = batch_size
        self._params: dict[str, str] | None = None

    def parameters(self) -> dict[str, str]:
        if self._params is None:
            try:
                cfg = self._c.get_model_config(self.model, as_json=True)["config"]
            except Exception as exc:  # tritonclient raises InferenceServerException
                raise ClientError(f"cannot read the config of model {self.model!r} at {self.url}: {exc}",
                                  "is the server up and the model name right? (`embtrt serve` prints them)") from exc
            params = {k: v.get("string_value", "") for k, v in cfg.get("parameters", {}).items()}
            if params.get("embtrt.kind") != "sparse":
                raise ClientError(f"model {self.model!r} is not a sparse encoder (kind {params.get('embtrt.kind', 'embedder')})",
                                  "embed with EmbeddingClient, rank with RerankClient")
            params["max_batch_size"] = str(cfg.get("max_batch_size", 0))
            self._params = params
        return self._params

    @property
    def vocab(self) -> int:
        return int(self.parameters()["embtrt.dim"])

    def _infer(self, texts: list[str], params: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                r = self._c.infer(self.model, [text_input(texts)], client_timeout=self.timeout_s, parameters=params or None)
                return r.as_numpy("SPARSE_INDICES"), r.as_numpy("SPARSE_VALUES"), r.as_numpy("TOKENS").reshape(-1)
            except Exception as exc:  # InferenceServerException; decide retry or fail
                if attempt < self.retries and retryable(exc):
                    time.sleep(backoff(delay))
                    delay *= 2
                    continue
                raise _failure(self.model, exc) from exc
        raise AssertionError("unreachable")

    def encode(self, texts: list[str], *, input_type: str | None = None, prompt_name: str | None = None,
               truncate: str | None = None, max_active_dims: int | None = None
               ) -> list[tuple[np.ndarray, np.ndarray]]:
        """[(indices, values)] per text, indices ascending: input_type query is encode_query,
        document (or passage) encode_document; max_active_dims keeps the K largest weights."""
        if isinstance(texts, str):
            raise ClientError("encode() takes a list of texts, got a single str", "wrap it: encode([text])")
        params = {k: v for k, v in {"input_type": input_type, "prompt_name": prompt_name, "truncate": truncate,
                                    "max_active_dims": max_active_dims}.items() if v is not None}
        bs = self._batch or max(1, int(self.parameters()["max_batch_size"]))
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

    def close(self) -> None:
        self._c.close()

    def __enter__(self) -> "SparseClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
