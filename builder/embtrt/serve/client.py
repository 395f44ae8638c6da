"""EmbeddingClient: texts -> vectors over tritonclient gRPC, sync and asyncio.

Large lists are split into requests of at most `batch_size` texts. Only failures that are
safe to retry (the server was unavailable or its queue was full) are retried, with
exponential backoff; a bad request fails at once with the server's message. Given several
replicas (`url="host1:8001,host2:8001"` or a list), a retry goes to the next one, so a replica
that is draining (it refuses with UNAVAILABLE) or gone costs one backoff, not a failed call.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
from embtrt_backend.kinds import BY_NAME, POOLED, Kind, kind_of

from ..errors import BadRequestError, ClientError
from . import wire
from .wire import backoff, output_name, outputs, retryable, text_input

# the wire's pieces under the names this module's callers import (tests/integration/test_request_options.py)
_text_input, _output_name, _retryable, _backoff = text_input, output_name, retryable, backoff


def replicas(url: str | list[str] | tuple[str, ...]) -> list[str]:
    """The replica addresses of `url`: a list, or one string with commas between them."""
    urls = [u.strip() for u in (url.split(",") if isinstance(url, str) else url) if u.strip()]
    if not urls:
        raise ClientError(f"no server address in url={url!r}", "give host:port, or several joined by commas")
    return urls


class _Replicas:
    """The replica clients of `urls`, one current: a retry moves to the next (both clients' rotation)."""

    def _connect(self, url, make) -> None:
        self.urls = replicas(url)
        self._cs = [make(u) for u in self.urls]
        self._at = 0

    @property
    def url(self) -> str:
        return self.urls[self._at]

    @property
    def _c(self):
        return self._cs[self._at]

    def _next_replica(self) -> None:
        self._at = (self._at + 1) % len(self._cs)


class GrpcClient(_Replicas):
    """A blocking client of one served model over its replicas: the config (a replica that cannot answer:
    the next one), calls retried where safe (wire.with_retries, moving to the next replica), the connection's
    lifetime. The embedding, rerank and sparse clients."""

    def __init__(self, url: str | list[str], model: str, *, batch_size: int | None = None, timeout_s: float = 60.0,
                 retries: int = 4, backoff_s: float = 0.05) -> None:
        import tritonclient.grpc as grpcclient

        self.model, self._batch = model, batch_size
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._connect(url, grpcclient.InferenceServerClient)

    def _config(self) -> tuple[dict, dict[str, str]]:
        for k in range(len(self._cs)):   # a replica that cannot answer: the next one
            try:
                return model_config(self._c, self.model, self.url)
            except ClientError as exc:
                if k == len(self._cs) - 1 or not retryable(str(exc)):
                    raise
                self._next_replica()
        raise AssertionError("unreachable")

    def _retrying(self, call):
        """call(), retried with exponential backoff on the next replica where the failure is safe to
        retry; else the failure as the error the caller can act on."""
        return wire.with_retries(call, self.retries, self.backoff_s, lambda exc: _failure(self.model, exc), self._next_replica)

    def close(self) -> None:
        for c in self._cs:
            c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def request_options(prompt_name: str | None = None, input_type: str | None = None, dimensions: int | None = None,
                    truncate: str | None = None, embedding_type: str | None = None) -> dict:
    """The Triton request parameters of the front door's per-request options (None: not sent)."""
    opts = {"prompt_name": prompt_name, "input_type": input_type, "dimensions": dimensions,
            "truncate": truncate, "embedding_type": embedding_type}
    return {k: v for k, v in opts.items() if v is not None}


def model_config(c, model: str, url: str, timeout_s: float | None = None) -> tuple[dict, dict[str, str]]:
    """A served model's config (Triton's JSON form) and its string parameters, from a tritonclient
    gRPC client `c`; a server or model that does not answer is a ClientError saying so."""
    try:
        cfg = c.get_model_config(model, as_json=True, client_timeout=timeout_s)["config"]
    except Exception as exc:  # tritonclient raises InferenceServerException
        raise ClientError(f"cannot read the config of model {model!r} at {url}: {exc}",
                          "is the server up and the model name right? (`embtrt serve` prints them)") from exc
    return cfg, {k: v.get("string_value", "") for k, v in cfg.get("parameters", {}).items()}


def _failure(model: str, exc: Exception) -> ClientError:
    """A failed call as the error the caller can act on: bad input (INVALID_ARGUMENT, exit 2) or not."""
    if wire.classify(exc) == wire.BAD:
        msg = str(exc).replace("[StatusCode.INVALID_ARGUMENT] ", "")
        return BadRequestError(f"{model}: {msg}", "the request was refused as bad input; fix the text or the option named")
    return ClientError(f"{model}: {exc}")


@dataclass
class ModelIdentity:
    name: str
    dim: int
    max_batch_size: int
    parameters: dict[str, str]

    @property
    def identity(self) -> dict[str, str]:
        return {k: v for k, v in self.parameters.items() if k.startswith("embtrt.")}


def _hint(kind: str) -> str:
    """How a model of this kind is called (its own client), for a client of another kind that named it."""
    found = BY_NAME.get(kind)
    return found.client_hint if found is not None else f"a {kind} model needs a newer embtrt's client"


def embeds_texts(kind: Kind) -> bool:
    """A model of this kind answers EmbeddingClient: a text in (TEXT), a pooled vector out (EMBEDDING)."""
    return not kind.pairs and kind.has(POOLED)


class KindClient(GrpcClient):
    """A gRPC client of one front door whose config says its kind is one this client takes (`accepts`: the
    kind named KIND, or for a client of a capability the kinds that have it), read once."""

    KIND = ""
    _params: dict[str, str] | None = None
    _cfg: dict | None = None

    def accepts(self, kind: Kind) -> bool:
        return kind.name == self.KIND

    def refusal(self, found: str) -> str:
        """What a model of another kind is told, with the client that kind takes (its hint)."""
        return f"model {self.model!r} is not {kind_of(self.KIND).label} (kind {found})"

    def parameters(self) -> dict[str, str]:
        """The front door's config parameters (and its max_batch_size); a model of a kind it does not take is
        refused naming the client that model takes."""
        if self._params is None:
            cfg, params = self._config()
            found = params.get("embtrt.kind") or kind_of(None).name
            if found not in BY_NAME or not self.accepts(BY_NAME[found]):
                raise ClientError(self.refusal(found), _hint(found))
            params["max_batch_size"] = str(cfg.get("max_batch_size", 0))
            self._cfg, self._params = cfg, params
        return self._params

    @property
    def batch_size(self) -> int:
        return self._batch or max(1, int(self.parameters()["max_batch_size"]))


class EmbeddingClient(KindClient):
    """Texts in, one pooled vector each out: a model of any kind with a text input and a pooled head."""

    def __init__(self, url: str | list[str] = "127.0.0.1:8001", model: str = "all_minilm_l6_v2", **options) -> None:
        super().__init__(url, model, **options)
        self._meta: ModelIdentity | None = None

    def accepts(self, kind: Kind) -> bool:
        return embeds_texts(kind)

    def refusal(self, found: str) -> str:
        what = BY_NAME[found].label if found in BY_NAME else f"of kind {found}"
        return f"model {self.model!r} at {self.url} is {what}, not an embedder (texts in, one pooled vector each out)"

    def metadata(self) -> ModelIdentity:
        if self._meta is None:
            params = dict(self.parameters())
            assert self._cfg is not None
            dims = self._cfg["output"][0].get("dims", ["0"])
            dim = int(params["embtrt.dim"]) if params.get("embtrt.dim") else int(dims[-1])
            self._meta = ModelIdentity(self.model, dim, int(params.pop("max_batch_size")), params)
        return self._meta

    def _infer(self, texts: list[str], params: dict | None = None) -> np.ndarray:
        params = params or {}
        out = output_name(params)
        return self._retrying(lambda: self._c.infer(self.model, [text_input(texts)], client_timeout=self.timeout_s,
                                                    outputs=outputs(out), parameters=params or None).as_numpy(out))

    def embed(self, texts: list[str], *, prompt_name: str | None = None, input_type: str | None = None,
              dimensions: int | None = None, truncate: str | None = None, embedding_type: str | None = None) -> np.ndarray:
        """Vectors in input order. The options are the front door's request parameters (each equals
        SentenceTransformer.encode with the same option): prompt_name or input_type (query |
        passage | document), dimensions (Matryoshka width), truncate (END | START | NONE),
        embedding_type (float | int8 | uint8 | binary | ubinary: int8 and binary come back as
        int8, uint8 and ubinary as uint8, binary ones packed 8 dimensions a byte)."""
        if isinstance(texts, str):
            raise ClientError("embed() takes a list of texts, got a single str", "wrap it: embed([text])")
        params = request_options(prompt_name, input_type, dimensions, truncate, embedding_type)
        if not texts:
            return np.zeros((0, self.metadata().dim), dtype=np.float32)
        bs = self.batch_size
        parts = [self._infer(list(texts[i:i + bs]), params) for i in range(0, len(texts), bs)]
        return np.concatenate(parts)


def model_kind(url: str, model: str, timeout_s: float = 10.0) -> str:
    """The served model's kind (its config's embtrt.kind; embedders built before kinds have none)."""
    import tritonclient.grpc as grpcclient

    last: ClientError | None = None
    for u in replicas(url):   # the first replica that answers (as the clients rotate over them)
        c = grpcclient.InferenceServerClient(u)
        try:
            _, params = model_config(c, model, u, timeout_s)
        except ClientError as exc:
            last = exc
            continue
        finally:
            c.close()
        try:
            return kind_of(params.get("embtrt.kind")).name
        except ValueError as exc:
            raise ClientError(f"model {model!r} at {u}: {exc}", "this embtrt is older than the repository: upgrade it") from None
    assert last is not None
    raise last


class AsyncEmbeddingClient(_Replicas):
    """asyncio variant: requests of one embed() call run concurrently."""

    def __init__(self, url: str | list[str] = "127.0.0.1:8001", model: str = "all_minilm_l6_v2", *,
                 batch_size: int = 32, timeout_s: float = 60.0, retries: int = 4, backoff_s: float = 0.05) -> None:
        import tritonclient.grpc.aio as aioclient

        self.model, self.batch_size = model, batch_size
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._connect(url, aioclient.InferenceServerClient)

    async def identity(self) -> dict[str, str]:
        cfg = await self._c.get_model_config(self.model, as_json=True)
        params = cfg["config"].get("parameters", {})
        return {k: v.get("string_value", "") for k, v in params.items() if k.startswith("embtrt.")}

    async def _infer(self, texts: list[str], params: dict | None = None) -> np.ndarray:
        params = params or {}
        out = output_name(params)
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                r = await self._c.infer(self.model, [text_input(texts)], client_timeout=self.timeout_s,
                                        outputs=outputs(out), parameters=params or None)
                return r.as_numpy(out)
            except Exception as exc:  # InferenceServerException; decide retry or fail
                if attempt < self.retries and retryable(exc):
                    self._next_replica()
                    await asyncio.sleep(backoff(delay))
                    delay *= 2
                    continue
                raise _failure(self.model, exc) from exc
        raise AssertionError("unreachable")

    async def embed(self, texts: list[str], *, prompt_name: str | None = None, input_type: str | None = None,
                    dimensions: int | None = None, truncate: str | None = None,
                    embedding_type: str | None = None) -> np.ndarray:
        """As EmbeddingClient.embed, with the requests of one call sent concurrently."""
        if not texts:
            raise ClientError("embed() needs at least one text")
        params = request_options(prompt_name, input_type, dimensions, truncate, embedding_type)
        parts = await asyncio.gather(*[self._infer(list(texts[i:i + self.batch_size]), params)
                                       for i in range(0, len(texts), self.batch_size)])
        return np.concatenate(parts)

    async def close(self) -> None:
        for c in self._cs:
            await c.close()

    async def __aenter__(self) -> "AsyncEmbeddingClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()



def served_models(url: str, timeout_s: float = 10.0) -> list[str]:
    """The embtrt models (front doors) a server serves: its ready models whose config carries an embtrt
    identity and the front door's `buckets` (the bucket ensembles, tokenizers and encoders have none)."""
    import tritonclient.grpc as grpcclient

    c = grpcclient.InferenceServerClient(url)
    try:
        try:
            index = c.get_model_repository_index(as_json=True, client_timeout=timeout_s).get("models", [])
        except Exception as exc:  # tritonclient raises InferenceServerException
            raise ClientError(f"cannot list the models at {url}: {exc}", "is the server up? (`embtrt serve` prints its address)") from exc
        out = []
        for m in index:
            if m.get("state") != "READY":
                continue
            params = model_config(c, m["name"], url, timeout_s)[1]
            if "embtrt.model" in params and "buckets" in params:
                out.append(m["name"])
        return sorted(set(out))
    finally:
        c.close()


def resolve_model(url: str, model: str | None) -> str:
    """`model`, or the one embtrt model the server at `url` serves; a ClientError naming them where it
    serves none or several."""
    if model:
        return model
    names = served_models(replicas(url)[0])
    if len(names) == 1:
        return names[0]
    if not names:
        raise ClientError(f"the server at {url} serves no embtrt model", "serve a repository written by embtrt build")
    raise ClientError(f"the server at {url} serves several models ({', '.join(names)})", "pick one with --model NAME")
