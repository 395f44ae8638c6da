"""The models behind one gateway (`MultiGateway`): one model per repository, of its kind's gateway
class (`Kind.gateway_model`, each a model.GatewayModel: the embedder's `Embedder`, the reranker's `Reranker`, the sparse
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


# what the gateway itself calls on every model, whatever it serves: readiness, its /v1/models entry and TEI's
# /info (`tei_type`); and every model has its request `schema`
EVERY_MODEL = ("ready", "describe", "tei_type")


def check_capabilities(g: Any, ops: tuple[str, ...]) -> None:
    """SpecError at start, naming the model and the missing methods, where a model's gateway class lacks
    what the gateway or an operation of its kind calls (Operation.needs)."""
    cls = type(g).__name__
    lacks = [m for m in EVERY_MODEL if not callable(getattr(g, m, None))] + ([] if hasattr(g, "schema") else ["schema"])
    if lacks:
        raise SpecError(f"{g.served.name} ({g.kind.label}): its gateway class {cls} lacks {', '.join(lacks)}, which the "
                        "gateway calls on every model", "a kind's gateway model (Kind.gateway_model) has them")
    for name in ops:
        op = operations().get(name)
        if op is None or not op.needs or any(all(callable(getattr(g, m, None)) for m in want) for want in op.needs):
            continue
        raise SpecError(f"{g.served.name} ({g.kind.label}) serves the operation {name!r}, but its gateway class {cls} "
                        f"lacks {' or '.join(', '.join(w) for w in op.needs)}",
                        "a kind's gateway model (Kind.gateway_model) has the methods of every operation its Kind.operations "
                        "names (Operation.needs)")


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
        self.models: dict[str, Any] = {}   # every model, of every kind, by the name it is reported by
        self.own_names: dict[str, str] = {}   # a model's own name (its repository's) -> the name it is reported by
        self.more_names: dict[str, tuple[str, ...]] = {}   # a reported name -> its other names
        self.reported: dict[str, str] = {}   # every name a model answers to -> its reported name (metrics' label)
        renamed = dict(cfg.served_names)
        # each operation's models by name: a model serves its kind's operations (Kind.operations), one or several
        self.serving: dict[str, dict[str, Any]] = {op: {} for op in operations()}
        self.kinds: dict[str, Kind] = {}   # every model's kind, by name (a model named on another kind's route is refused)
        for repo in repos:
            kind = implementation(kind_of(served_kind(repo)), "gateway_model")
            g = kind(cfg, repo, self.metrics, self.upstream, several=len(repos) > 1, admission=self.admission)
            if g.served.name in self.own_names:
                raise SpecError(f"two repositories serve a model named {g.served.name!r} ({repo})",
                                "build one of them with another --name")
            check_capabilities(g, (*g.kind.operations, *COMMON))
            names = renamed.get(g.served.name, (g.served.name,))   # --served-model-name: the first is reported
            taken = [n for n in names if n in self.kinds]
            if taken:
                raise SpecError(f"two models would answer to {', '.join(map(repr, taken))}", "give each its own names")
            self.own_names[g.served.name] = names[0]
            self.more_names[names[0]] = names[1:]
            self.reported.update((n, names[0]) for n in names)
            self.models[names[0]] = g
            for n in names:
                self.kinds[n] = g.kind
            for op in (*g.kind.operations, *COMMON):
                if op not in self.serving:
                    raise SpecError(f"{g.kind.label} serves the operation {op!r}, which the gateway does not have",
                                    "an operation is a module of scale/gateway/ops with its shapes in scale/gateway/dialects")
                for n in names:
                    self.serving[op][n] = g
        named = {e[0] for e in cfg.pools if len(e) == 3}
        if named - set(self.own_names):   # pools are named by the models' own names
            raise SpecError(f"invalid --pool: no model named {', '.join(sorted(named - set(self.own_names)))}",
                            f"models: {', '.join(self.own_names)}")
        if cfg.default_model is not None and cfg.default_model not in self.kinds:
            raise SpecError(f"invalid --default-model {cfg.default_model!r}: no model of that name",
                            f"models: {', '.join(self.models)}")
        self.several = len(self.models) > 1
        # the operations some model here serves (its kind's: Kind.operations); the route table serves those routes
        self.operations = [op for op, models in self.serving.items() if models]   # in the route table's order
        # what parsing a request needs of each model serving each operation (its `schema`)
        self.schemas: dict[str, dict[str, Any]] = {op: {name: g.schema for name, g in models.items()}
                                                   for op, models in self.serving.items()}

    def answered_routes(self) -> list:
        """The route table's routes this gateway answers: a model operation some model here serves (an
        operation a model's build refuses, as a fused-pooling embedder's token vectors, is left out: its
        `refused_operations`), and the gateway's own routes."""
        from .route_table import OWN_OPERATIONS, ROUTES

        ops = {op for op, models in self.serving.items()
               if any(op not in getattr(g, "refused_operations", ()) for g in models.values())}
        return [r for r in ROUTES if r.operation in ops or r.operation in OWN_OPERATIONS]

    def advertised(self) -> list[str]:
        """The start-up line's routes: the POST routes, then the GET routes, that it answers."""
        routes = self.answered_routes()
        return [f"{m} {', '.join(r.path for r in routes if r.method == m)}" for m in ("POST", "GET")]

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
        out = []
        for name, g in self.models.items():
            d = g.describe()
            own = g.served.name
            if name != own:   # reported by its --served-model-name: its NAME-query aliases and other names too
                d = {**d, "id": name, "root": own}
                if "aliases" in d:
                    d["aliases"] = [name + a[len(own):] if a.startswith(own) else a for a in d["aliases"]]
            if self.more_names.get(name):
                d = {**d, "aliases": [*d.get("aliases", []), *self.more_names[name]]}
            out.append(d)
        return out
