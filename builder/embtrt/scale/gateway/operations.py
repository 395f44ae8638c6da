"""The operations served models take over HTTP (#50 item 3, #69 items 2 and 3): what http.Handler runs
between the envelope (key, admission, body, deadline, errors, metrics) and the response, one row per operation.

An operation is a part of the gateway, not of a kind: its module in ops/ says what its request is and what a
model serving it must have (`needs`, checked at start: registry.check_capabilities); its request shapes are
the dialects' (dialects/: one module per API family, each holding its shape of every operation it has). A
route's body is parsed by the shape of the route's dialect (route_table.py, the one literal table) into a
request naming the served model; the answer is the shape of the request's own dialect (vLLM's rerank body on
TEI's /rerank answers as Cohere's). A kind serves the operations its `Kind.operations` name; a new kind that
serves operations that exist brings no row.
"""

from __future__ import annotations

from collections.abc import Awaitable
from functools import cache

from .dialects import SHAPES
from .operation import Answer, Declared, Operation
from .ops import classify, embed, rank, sparse, tokenize, tokens
from .route_table import OWN_OPERATIONS, ROUTES, routes_of

__all__ = ["Answer", "Operation", "COMMON", "operations"]

# the operations every served model takes, whatever its kind (after the others)
COMMON = tuple(op.name for op in tokenize.OPERATIONS)


# the operations that are parts of the gateway (scale/gateway/ops), each module's declared rows
SHARED: tuple[Declared, ...] = (*embed.OPERATIONS, *rank.OPERATIONS, *sparse.OPERATIONS, *classify.OPERATIONS,
                                *tokens.OPERATIONS, *tokenize.OPERATIONS)


def row(op: Declared) -> Operation:
    """A shared operation's row: a route's body parsed by its dialect's shape, answered by the request's own
    (both looked up once per request, in tables made here)."""
    parsers = {path: SHAPES[(op.name, d)].parse for path, d in routes_of(op.name).items() if (op.name, d) in SHAPES}
    answers = {api: shape.answer for (name, api), shape in SHAPES.items() if name == op.name}

    def parse(models, kinds, cfg, path: str, body):
        return parsers[path](models, kinds, cfg, path, body)

    def answer(model, req) -> Awaitable[Answer]:   # the shape's own coroutine, not one more around it
        return answers[req.api](model, req)
    return Operation(op.name, op.metric_route, op.latency, parse, answer, needs=op.needs)


@cache
def operations() -> dict[str, Operation]:
    """Every operation, by name: the shared ones (SHARED's order), then the gateway's COMMON ones; ValueError
    where two rows name one operation or the route table disagrees (check_table)."""
    out: dict[str, Operation] = {}
    for op in map(row, SHARED):
        if op.name in out:
            raise ValueError(f"two rows of the gateway operation {op.name!r}")
        out[op.name] = op
    check_table(out)
    return out


def check_table(ops: dict[str, Operation]) -> None:
    """The route table and the operations agree: every operation has a route, every route's operation is one
    (or the gateway's own) and its dialect's module holds its shape; ValueError naming the first that does not."""
    for name, op in ops.items():
        if not op.routes:
            raise ValueError(f"the operation {name!r} has no route in scale/gateway/route_table.py")
    for r in ROUTES:
        if r.operation not in ops and r.operation not in OWN_OPERATIONS:
            raise ValueError(f"the route {r.method} {r.path} names the operation {r.operation!r}, which the gateway does not have")
        if r.operation in {op.name for op in SHARED} and (r.operation, r.dialect) not in SHAPES:
            raise ValueError(f"the route {r.method} {r.path} speaks {r.dialect!r}, whose module holds no "
                             f"{r.operation!r} shape (scale/gateway/dialects)")
