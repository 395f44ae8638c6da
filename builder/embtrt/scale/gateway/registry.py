"""The models behind one gateway (`MultiGateway`): one model per repository, of its kind's gateway
class (`Kind.gateway_model`: the embedder's `Gateway`, the reranker's `Reranker`, the sparse
encoder's `Sparse`), sharing the upstream clients and the metrics; the models serving each operation
and what each allows a request (its `schema`, for the parsers' `model` resolution, NAME-query
aliases included); readiness of every pool; the /v1/models entries."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from embtrt_backend.kinds import Kind, kind_of

from ...common.plugins import implementation
from ...errors import SpecError
from .admission import Admission
from .config import GatewayConfig
from .metrics import Metrics
from .operations import COMMON, operations
from .served import served_kind
from .upstream import Upstream


class MultiGateway:
    """Several models (repositories) behind one gateway: `model` picks one (or NAME-query ...);
    upstream clients and metrics are shared; unknown names are 404."""

    def __init__(self, cfg: GatewayConfig) -> None:
        self.cfg = cfg
        self.metrics = Metrics()
        self.upstream = Upstream(cfg.attempts, cfg.timeout_s, self.metrics, tls_ca=cfg.pool_tls_ca)
        self.admission = Admission(cfg.admission())
        self._ready: tuple[float, int, dict[str, str]] | None = None
        self._ready_task: asyncio.Task | None = None
        repos = (cfg.repository, *cfg.more_repositories)
        self.models: dict[str, Any] = {}   # every model, of every kind
        # each operation's models by name: a model serves its kind's operations (Kind.operations), one or several
        self.serving: dict[str, dict[str, Any]] = {op: {} for op in operations()}
        self.kinds: dict[str, Kind] = {}   # every model's kind, by name (a model named on another kind's route is refused)
        for repo in repos:
            kind = implementation(kind_of(served_kind(repo)), "gateway_model")
            g = kind(cfg, repo, self.metrics, self.upstream, several=len(repos) > 1, admission=self.admission)
            if g.served.name in self.models:
                raise SpecError(f"two repositories serve a model named {g.served.name!r} ({repo})",
                                "build one of them with another --name")
            self.models[g.served.name] = g
            self.kinds[g.served.name] = g.kind
            for op in (*g.kind.operations, *COMMON):
                if op not in self.serving:
                    raise SpecError(f"{g.kind.label} serves the operation {op!r}, which no kind brings "
                                    "(Kind.gateway_operations)", "a kind's package must bring its operations' rows")
                self.serving[op][g.served.name] = g
        named = {e[0] for e in cfg.pools if len(e) == 3}
        if named - set(self.models):
            raise SpecError(f"invalid --pool: no model named {', '.join(sorted(named - set(self.models)))}",
                            f"models: {', '.join(self.models)}")
        if cfg.default_model is not None and cfg.default_model not in self.models:
            raise SpecError(f"invalid --default-model {cfg.default_model!r}: no model of that name",
                            f"models: {', '.join(self.models)}")
        self.several = len(self.models) > 1
        # the operations some model here serves (its kind's: Kind.operations); the route table serves those routes
        self.operations = [op for op, models in self.serving.items() if models]   # in the route table's order
        # what parsing a request needs of each model serving each operation (its `schema`)
        self.schemas: dict[str, dict[str, Any]] = {op: {name: g.schema for name, g in models.items()}
                                                   for op, models in self.serving.items()}

    async def close(self) -> None:
        await self.upstream.close()
        self.admission.close()

    async def ready(self) -> dict[str, str]:
        """Every pool's state from a probe at most `ready_cache_s` old: concurrent callers share one
        probe, and a readiness endpoint polled hard costs one inference per period, not one per call."""
        now = time.monotonic()
        if self._ready is not None and now - self._ready[0] < self.cfg.ready_cache_s \
                and self._ready[1] == self.upstream.failures:  # no call failed since: still true
            return self._ready[2]
        if self._ready_task is None or self._ready_task.done():
            self._ready_task = asyncio.ensure_future(self._probe())
        return await asyncio.shield(self._ready_task)

    async def _probe(self) -> dict[str, str]:
        failures = self.upstream.failures
        out = await self._probe_pools()
        self._ready = (time.monotonic(), failures, out)
        return out

    async def _probe_pools(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, g in self.models.items():
            for pool, state in (await g.ready()).items():
                out[f"{name}/{pool}" if self.several else pool] = state
        return out

    def describe(self) -> list[dict]:
        """/v1/models entries: each model's own (its kind, identity and request options)."""
        return [g.describe() for g in self.models.values()]
