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

from functools import cache

from embtrt_backend.kinds import KINDS

from ...common.plugins import implementation
from .operation import Answer, Operation
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
    return out
