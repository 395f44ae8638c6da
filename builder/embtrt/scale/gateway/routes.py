"""Finding a request's route in the gateway's table (route_table.py: (method, path, operation, dialect),
one literal tuple). `Routes.find` picks the handler of an operation for a request, or the error a
client gets:

- a known path asked with another method: 405 with `Allow` naming the methods it takes;
- an unknown path: 404 in the gateway's JSON envelope naming the routes this gateway serves (the
  operations of the models it fronts, and its own).
"""

from __future__ import annotations

from typing import Callable, Collection

from .errors import ApiError
from .operations import operations
from .route_table import ROUTES, Route


def all_routes() -> tuple[Route, ...]:
    """Every route: the literal table (route_table.ROUTES)."""
    return ROUTES


class Routes:
    """The routes (all_routes() unless given); `handlers` maps each operation to its ASGI handler; `served` is the set of
    model operations some model behind the gateway takes (the 404 names only those routes)."""

    def __init__(self, handlers: dict[str, Callable], served: Collection[str], routes: tuple[Route, ...] | None = None) -> None:
        table = routes if routes is not None else all_routes()
        missing = {r.operation for r in table} - set(handlers)
        if missing:
            raise ValueError(f"no handler for the operations {sorted(missing)}")
        self._by_key = {(r.method, r.path): handlers[r.operation] for r in table}
        # a path ending in a parameter ("/v1/models/{id}"): its prefix, for paths that are not a route themselves
        self._templates = {r.path[:r.path.index("{")]: r.path for r in table if "{" in r.path}
        self._allow: dict[str, list[str]] = {}
        for r in table:
            self._allow.setdefault(r.path, []).append(r.method)
        model_ops = operations()
        self.served = [r for r in table if r.operation not in model_ops or r.operation in served]

    def find(self, method: str, path: str) -> Callable:
        """The handler of `method path`; ApiError 405 (known path) or 404 (unknown) otherwise."""
        handler = self._by_key.get((method, path))
        if handler is not None:
            return handler
        template = next((t for prefix, t in self._templates.items() if path.startswith(prefix) and len(path) > len(prefix)),
                        None)
        if template is not None:
            handler = self._by_key.get((method, template))
            if handler is not None:
                return handler
            path = template
        allow = self._allow.get(path)
        if allow is not None:
            err = ApiError(405, f"{path} takes {' or '.join(allow)}, not {method}",
                           code="method_not_allowed")
            err.headers = [(b"allow", ", ".join(allow).encode())]
            raise err
        raise ApiError(404, f"no route {method} {path}; this gateway serves " + self.describe(), code="unknown_route")

    def describe(self) -> str:
        """`POST /v1/embeddings, POST /v1/rerank, ...`: the routes served, in the table's order."""
        return ", ".join(f"{r.method} {r.path}" for r in self.served)
