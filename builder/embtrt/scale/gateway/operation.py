"""One gateway operation's row (`Operation`): what http.Handler runs for a route between the
envelope and the response. The rows live with what brings them (the kinds' scale_routes /
scale_schema, the gateway's tokenize.py); operations.py collects them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from embtrt_backend.kinds import Kind

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
