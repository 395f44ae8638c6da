"""The operations served models take over HTTP (#50 item 3): what http.Handler runs between the
envelope (key, admission, body, deadline, errors, metrics) and the response, one row per operation.

An operation parses a route's body in that route's dialect into a request naming the served
model, asks the model behind it, and renders the answer in the dialect again. Each kind brings the
rows of the operations it introduces (`Kind.gateway_operations`, in its package's scale_schema:
`embed` the embedder's, `rank` the reranker's, `embed_sparse` the sparse encoder's), so a new
operation (a classifier's `classify`, a multi-vector model's token vectors) is one row in the new
kind's package; a kind serving operations that exist already (`Kind.operations`) brings none. The
envelope and the route table (routes.py) are not written again.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Awaitable, Callable, Mapping

from embtrt_backend.kinds import KINDS, Kind

from ...common.plugins import implementation

Answer = tuple[Any, int, list]   # (the response document, its size about, extra headers)


@dataclass(frozen=True)
class Operation:
    name: str                      # what a Kind's `operations` names
    metric_route: str              # the `route` label of embtrt_gateway_requests (dashboards read it)
    latency: str                   # the Metrics histogram of its successful requests' latency
    routes: Mapping[str, str]      # its POST paths, each with the dialect (API shape) it speaks there
    # (what parsing needs of each model serving it, by name; every model's kind, by name; GatewayConfig,
    # path, JSON body) -> the request; its `served` names the model
    parse: Callable[[Mapping[str, Any], Mapping[str, Kind], Any, str, Any], Any]
    answer: Callable[[Any, Any], Awaitable[Answer]]   # (the model, the request) -> the answer in the route's dialect


@cache
def operations() -> dict[str, Operation]:
    """Every operation the kinds bring, by name, in the kinds' order (imported on first use: the
    kinds' rows import this module)."""
    out: dict[str, Operation] = {}
    for kind in KINDS:
        for op in (implementation(kind, "gateway_operations") if kind.gateway_operations else ()):
            if op.name in out:
                raise ValueError(f"two kinds bring the gateway operation {op.name!r}")
            out[op.name] = op
    return out
