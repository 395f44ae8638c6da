"""The gateway's configuration: GatewayConfig (what `embtrt gateway` was asked for), --pool
parsing, and the pools of one model's buckets (which replicas serve which buckets)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import SpecError

MAX_ITEMS = 2048
ROUTES = ("auto", "frontdoor", "ids", "text")


@dataclass(frozen=True)
class GatewayConfig:
    repository: Path
    triton: str | None = None
    # (bucket, urls), or (model, bucket, urls) for one model of several repositories
    pools: tuple[tuple, ...] = ()
    more_repositories: tuple[Path, ...] = ()               # further models behind the same gateway
    api_key: str | None = None
    # TLS: HTTPS with this certificate and key; gRPC to the tritonservers verified against this CA
    tls_cert: Path | None = None
    tls_key: Path | None = None
    pool_tls_ca: Path | None = None
    # auto: frontdoor when all of a model's buckets are in one pool, else ids
    route: str = "auto"                                    # auto | frontdoor | ids | text
    max_items: int = MAX_ITEMS
    max_body_bytes: int = 16 << 20
    attempts: int = 4
    timeout_s: float = 60.0
    # Coalescing (route ids): rows of concurrent requests for one bucket go upstream as one call, at
    # most `coalesce_inflight` calls per replica in flight per pool; a call goes out at once while a
    # slot is free (a lone request never waits); a row waits at most `coalesce_us` for a slot.
    # 0 disables coalescing.
    coalesce_us: int = 2000
    coalesce_inflight: int = 2
    # token-id input ("input": [ids] / [[ids]]) only when asked: clients such as LangChain's
    # OpenAIEmbeddings send ids of tiktoken's vocabulary, which the model would embed as its own
    token_ids: bool = False
    # admission control (admission.py) and connection hygiene (connections.py)
    max_request_chars: int = 2_000_000
    max_request_tokens: int = 262_144
    max_vector_bytes: int = 32 << 20   # token vectors (float32) one request may be answered with (multi-vector)
    max_concurrent: int = 256
    cpu_threads: int = 2
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 5.0
    max_connections: int = 1024
    ready_cache_s: float = 2.0     # /health/ready answers from a probe at most this old
    # the model a body without `model` (TEI's, vLLM's, Cohere's) names where several serve its route
    default_model: str | None = None
    # the names clients call a model by, in place of its own (--served-model-name): (model, (name, alias ...))
    served_names: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # origins browsers may call the gateway from (--cors-allow-origin; "*": any); none: no CORS headers
    cors_origins: tuple[str, ...] = ()
    # OpenTelemetry traces to this OTLP/HTTP endpoint (tracing.py; None: the OTEL_* variables, else off)
    otlp_endpoint: str | None = None
    trace_sample: float | None = None

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise SpecError("invalid tls_cert / tls_key: give both or neither", "--tls-cert CERT.pem --tls-key KEY.pem")
        for name in ("tls_cert", "tls_key", "pool_tls_ca"):
            if getattr(self, name) is not None and not Path(getattr(self, name)).is_file():
                raise SpecError(f"invalid {name}: {getattr(self, name)} is not a file", "a PEM file")
        if self.route not in ROUTES:
            raise SpecError(f"invalid route: {self.route!r}", " | ".join(ROUTES))
        if self.max_vector_bytes < 1:
            raise SpecError(f"invalid max_vector_bytes: {self.max_vector_bytes}", "at least 1")
        if not 1 <= self.max_items <= MAX_ITEMS:
            raise SpecError(f"invalid max_items: {self.max_items}", f"1 .. {MAX_ITEMS}")
        if not 0 <= self.coalesce_us <= 1_000_000:
            raise SpecError(f"invalid coalesce_us: {self.coalesce_us}", "0 (off) .. 1000000")
        if not 1 <= self.coalesce_inflight <= 64:
            raise SpecError(f"invalid coalesce_inflight: {self.coalesce_inflight}", "1 .. 64")
        for name in ("header_timeout_s", "body_timeout_s", "idle_timeout_s", "timeout_s"):
            if not 0 < float(getattr(self, name)) <= 3600:
                raise SpecError(f"invalid {name}: {getattr(self, name)}", "seconds, > 0 and <= 3600")
        if self.max_connections < 1 or self.max_connections < self.max_concurrent:
            raise SpecError(f"invalid max_connections: {self.max_connections}",
                            f"at least max_concurrent ({self.max_concurrent})")

    def admission(self):
        from .admission import AdmissionConfig

        return AdmissionConfig(self.max_request_chars, self.max_request_tokens, self.max_concurrent, self.cpu_threads)

    def limits(self):
        from .connections import Limits

        return Limits(self.header_timeout_s, self.body_timeout_s, self.idle_timeout_s, self.max_connections)


def api_key_from(env_name: str | None) -> str | None:
    """--api-key-env: the key in that environment variable (None without the flag); an empty or unset
    variable is a SpecError, never a gateway without a key."""
    if not env_name:
        return None
    import os

    key = os.environ.get(env_name)
    if not key:
        raise SpecError(f"invalid --api-key-env {env_name}: that environment variable is empty or unset",
                        "export the key in that variable before starting the gateway")
    return key


def parse_served_names(values: list[str] | tuple[str, ...], models: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """--served-model-name values -> ((model, (name, alias, ...)), ...): `NAME` names the only model,
    `MODEL=NAME` one of several; repeated, the first name is the one reported and the others are aliases."""
    out: dict[str, list[str]] = {}
    for v in values:
        model, eq, name = v.partition("=")
        if not eq:
            if len(models) != 1:
                raise SpecError(f"invalid --served-model-name {v!r}: the gateway serves several models "
                                f"({', '.join(models)})", "write MODEL=NAME")
            model, name = models[0], v
        if model not in models:
            raise SpecError(f"invalid --served-model-name {v!r}: no model named {model!r}", f"models: {', '.join(models)}")
        if not name or not all(c.isalnum() or c in "-_./:" for c in name):
            raise SpecError(f"invalid --served-model-name {v!r}: a name of letters, digits and - _ . / :",
                            "e.g. text-embedding-3-small or BAAI/bge-small-en-v1.5")
        out.setdefault(model, []).append(name)
    return tuple((m, tuple(n)) for m, n in out.items())


def parse_pool(text: str) -> tuple:
    """'256=host:8001,host2:8001' -> (256, ('host:8001', 'host2:8001')); 'MODEL:256=host:8001' ->
    ('MODEL', 256, ('host:8001',)) for one model of several repositories."""
    head, sep, urls = text.partition("=")
    model, colon, bucket = head.rpartition(":") if ":" in head else ("", "", head)
    try:
        b = int(bucket)
    except ValueError:
        b = -1
    addrs = tuple(u.strip() for u in urls.split(",") if u.strip())
    if not sep or b < 1 or not addrs or (colon and not model):
        raise SpecError(f"invalid --pool {text!r}", "[MODEL:]BUCKET=HOST:PORT[,HOST:PORT...], e.g. 256=10.0.0.5:8001")
    return (model, b, addrs) if model else (b, addrs)


@dataclass
class Pool:
    name: str
    buckets: tuple[int, ...]
    urls: tuple[str, ...]
    _rr: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._rr = itertools.cycle(range(len(self.urls)))

    def order(self) -> list[str]:
        """This call's replica order: round robin start, then the others."""
        start = next(self._rr)
        return [self.urls[(start + i) % len(self.urls)] for i in range(len(self.urls))]


def model_pools(cfg: GatewayConfig, name: str, buckets: list[int], several: bool) -> list[Pool]:
    """The pools of one model's buckets: buckets served by the same replicas share a pool. A plain
    --pool BUCKET=... applies to every model that has that bucket (to the only model: all of them must
    be its buckets); MODEL:BUCKET=... to that model; --triton serves every bucket without a pool."""
    plain = {e[0]: e[1] for e in cfg.pools if len(e) == 2 and (not several or e[0] in buckets)}
    explicit = {**plain, **{e[1]: e[2] for e in cfg.pools if len(e) == 3 and e[0] == name}}
    unknown = sorted(set(explicit) - set(buckets))
    if unknown:
        raise SpecError(f"invalid --pool: buckets {unknown} are not buckets of {name}",
                        f"its buckets: {','.join(map(str, buckets))}")
    by_urls: dict[tuple[str, ...], list[int]] = {}
    for b in buckets:
        urls = explicit.get(b) or ((cfg.triton,) if cfg.triton else None)
        if not urls:
            raise SpecError(f"bucket {b} of {name} has no pool",
                            f"pass --pool {b}=HOST:PORT or --triton HOST:PORT for every bucket without a pool")
        by_urls.setdefault(tuple(urls), []).append(b)
    return [Pool(f"<={max(bs)}" if len(by_urls) > 1 else "all", tuple(bs), urls) for urls, bs in by_urls.items()]
