"""What the reranker and sparse clients share: the front door's config (its kind checked), calls
retried only where retrying is safe (serve.wire.retryable), and the connection's lifetime."""

from __future__ import annotations

from typing import Callable, TypeVar

from embtrt_backend.kinds import DEFAULT, kind_of

from ..errors import ClientError
from .client import _failure, model_config
from .wire import with_retries

T = TypeVar("T")


class KindClient:
    """A gRPC client of one front door whose config says `embtrt.kind == KIND` (a kind's name)."""

    KIND = ""

    def __init__(self, url: str, model: str, *, batch_size: int | None = None, timeout_s: float = 60.0,
                 retries: int = 4, backoff_s: float = 0.05) -> None:
        import tritonclient.grpc as grpcclient

        self.url, self.model = url, model
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._c = grpcclient.InferenceServerClient(url)
        self._batch = batch_size
        self._params: dict[str, str] | None = None

    def parameters(self) -> dict[str, str]:
        """The front door's config parameters (and its max_batch_size); a model of another kind is refused."""
        if self._params is None:
            cfg, params = model_config(self._c, self.model, self.url)
            if params.get("embtrt.kind") != self.KIND:
                kind = kind_of(self.KIND)
                raise ClientError(f"model {self.model!r} is not {kind.label} (kind {params.get('embtrt.kind', DEFAULT.name)})",
                                  kind.client_hint)
            params["max_batch_size"] = str(cfg.get("max_batch_size", 0))
            self._params = params
        return self._params

    @property
    def batch_size(self) -> int:
        return self._batch or max(1, int(self.parameters()["max_batch_size"]))

    def _retrying(self, call: Callable[[], T]) -> T:
        """call(), retried with exponential backoff where the failure is safe to retry; else the
        failure as the error the caller can act on."""
        return with_retries(call, self.retries, self.backoff_s, lambda exc: _failure(self.model, exc))

    def close(self) -> None:
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def model_kind(url: str, model: str, timeout_s: float = 10.0) -> str:
    """The served model's kind (its config's embtrt.kind; embedders built before kinds have none)."""
    import tritonclient.grpc as grpcclient

    c = grpcclient.InferenceServerClient(url)
    try:
        _, params = model_config(c, model, url, timeout_s)
    finally:
        c.close()
    return kind_of(params.get("embtrt.kind")).name
