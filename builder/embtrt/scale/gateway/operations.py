"""The operations served models take over HTTP (#50 item 3): what http.Handler runs between the
envelope (key, admission, body, deadline, errors, metrics) and the response, one row per operation.

An operation parses a route's body in that route's dialect into a request naming the served
model, asks the model behind it, and renders the answer in the dialect again. Each kind brings the
rows of the operations it introduces (`Kind.gateway_operations`, in its package's scale_schema:
`embed` the embedder's, `rank` the reranker's, `embed_sparse` the sparse encoder's), so a new
operation (a classifier's `classify`, a multi-vector model's token vectors) is one row in the new
kind's package; a kind serving operations that exist already (`Kind.operations`) brings none. The
envelope is not written again; an operation's routes are rows of the one literal table (route_table.py).
"""

from __future__ import annotations

from functools import cache

from embtrt_backend.kinds import KINDS

from ...common.plugins import implementation
from .operation import Answer, Operation
from .route_table import OWN_OPERATIONS, ROUTES
from .tokenize import OPERATIONS as TOKENIZE

__all__ = ["Answer", "Operation", "COMMON", "operations"]

# the operations every served model takes, whatever its kind (the gateway's own rows, after the kinds')
COMMON = tuple(op.name for op in TOKENIZE)


@cache
def operations() -> dict[str, Operation]:
    """Every operation the kinds bring, by name, in the kinds' order, then the gateway's COMMON ones
    (imported on first use: the kinds' rows are imported by their names in the registry)."""
    out: dict[str, Operation] = {}
    for kind in KINDS:
        for op in (implementation(kind, "gateway_operations") if kind.gateway_operations else ()):
            if op.name in out:
                raise ValueError(f"two kinds bring the gateway operation {op.name!r}")
            out[op.name] = op
    for op in TOKENIZE:
        out[op.name] = op
    check_table(out)
    return out


def check_table(ops: dict[str, Operation]) -> None:
    """The route table and the operations brought agree: every operation has a route, every route's
    operation is brought (or the gateway's own); ValueError naming the first that does not."""
    for name, op in ops.items():
        if not op.routes:
            raise ValueError(f"the operation {name!r} has no route in scale/gateway/route_table.py")
    for r in ROUTES:
        if r.operation not in ops and r.operation not in OWN_OPERATIONS:
            raise ValueError(f"the route {r.method} {r.path} names the operation {r.operation!r}, which no kind brings")
