"""One gateway operation's row (`Operation`): what http.Handler runs for a route between the
envelope and the response, made by operations.py of an operation's declaration (`Declared`, in ops/) and the
dialects' shapes of it (`Shape`, in dialects/); its routes are the route table's (route_table.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from embtrt_backend.kinds import Kind

from .route_table import routes_of

Answer = tuple[Any, int, list]   # (the response document, its size about, extra headers)


@dataclass(frozen=True)
class Operation:
    name: str                      # what a Kind's `operations` names
    metric_route: str              # the `route` label of embtrt_gateway_requests (dashboards read it)
    latency: str                   # the Metrics histogram of its successful requests' latency
    # (what parsing needs of each model serving it, by name; every model's kind, by name; GatewayConfig,
    # path, JSON body) -> the request; its `served` names the model
    parse: Callable[[Mapping[str, Any], Mapping[str, Kind], Any, str, Any], Any]
    answer: Callable[[Any, Any], Awaitable[Answer]]   # (the model, the request) -> the answer in the route's dialect
    # what `answer` calls on a model serving it: the methods of one of these sets (a kind's gateway model has
    # one of them; the gateway checks every model against its kind's operations when it starts: registry.py)
    needs: tuple[tuple[str, ...], ...] = ()

    @property
    def routes(self) -> dict[str, str]:
        """Its POST paths, each with the dialect (API shape) it speaks there: the route table's rows."""
        return routes_of(self.name)


@dataclass(frozen=True)
class Shape:
    """One operation's request shape in one dialect (the dialects' modules hold them): its parser, with
    Operation.parse's arguments, and its answer (the model asked, the response written in that shape)."""
    parse: Callable[[Mapping[str, Any], Mapping[str, Kind], Any, str, Any], Any]
    answer: Callable[[Any, Any], Awaitable[Answer]]


@dataclass(frozen=True)
class Declared:
    """A shared operation as its module (scale/gateway/ops) declares it: operations.py makes its row, parsing
    and answering with the dialects' shapes."""
    name: str
    metric_route: str
    latency: str
    needs: tuple[tuple[str, ...], ...]
