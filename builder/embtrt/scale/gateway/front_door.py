"""The front door's routing (`Door`), every kind's default: every request to the model's front door, which
tokenizes, plans every bucket and batches itself, so all its buckets are in one pool; and the front door's
request handling the routings share: the request core as the gateway admits it (`prepared`) and the front
door's refusal of one row as a 400 naming the request's item (`refusal`, `renamed`)."""

from __future__ import annotations

import re
from typing import Any, Callable

from ...errors import SpecError
from . import tracing
from .admission import Admission
from .errors import ApiError

_ROW = re.compile(r"\brow (\d+): (.*)$", re.S)   # the front door's refusal of one row


class Door:
    """Every request to the front door (one pool: a model whose buckets are in several pools is refused at start,
    naming the kind and what its front door does); readiness is the kind's probe."""

    route = "frontdoor"

    def __init__(self, model: Any) -> None:
        self.model = model
        if len(model.pools) > 1:
            raise SpecError(f"{model.served.name} is {model.kind.label}: its front door {model.does}, so all its buckets "
                            f"must be in one pool, not {len(model.pools)}",
                            "give its buckets the same --pool replicas, or --triton HOST:PORT")

    async def ready(self) -> dict[str, str]:
        """The pool must answer the probe with finite values, and (a kind taking images) the probe image too;
        {pool: 'ok' | reason}."""
        m = self.model
        try:
            rows, _ = await m.call(m.probe[1], m.probe[0], None, "input")
            state = "ok" if m.finite(rows) else f"non-finite {m.value}"
        except ApiError as exc:
            state = exc.message
        if state == "ok" and m.image_probe is not None:
            from embtrt_backend.images import PROBE_PNG

            try:
                rows, _ = await m.call([PROBE_PNG], m.image_probe, None, "input")
                state = "ok" if m.finite(rows) else f"non-finite {m.value} of an image"
            except ApiError as exc:
                state = f"image probe: {exc.message}"
        return {m.pool.name: state}


async def prepared(admission: Admission, core, texts: list[str] | None, ids: list[list[int]] | None, opts, field: str,
                   refused: Callable[[Exception], ApiError | None] | None = None):
    """One request through the front door's own request core (embtrt_backend.core.RequestCore: prompt,
    tokenize, refuse, plan), off the event loop for a large one, as the gateway admits it: a refused
    request raises `refused(error)` where that gives one, else the front door's refusal naming its item
    (`field[k]`); over the token cap a 413. -> the core's batch (its chunks' rows are the request's tokens)."""
    from embtrt_backend.core import Request

    size = sum(map(len, texts)) if texts is not None else 4 * sum(map(len, ids or ()))
    with tracing.span("tokenize", {"embtrt.items": len(texts if texts is not None else ids or ())}):
        batch = await admission.offload(size, core.prepare, [Request(texts, ids, opts)])
    out = batch.outcomes[0]
    if out is not None and out.error is not None:
        raise (refused(out.error) if refused is not None else None) or refusal(str(out.error), field, 0)
    admission.check_tokens(sum(len(x) for c in batch.chunks for x in c.ids), field)
    return batch


def renamed(exc: ApiError, field: str, rows: list[int], to: str | None = None, names: tuple[str, ...] = ()) -> ApiError:
    """A refusal naming `field[k]` of a part of a request (its rows `rows` of the request) -> the same error
    naming the request's item, `to[rows[k]]` (`to`: the request's own field name, default `field`), or its name
    in `names` where given (a message's own index)."""
    m = re.match(re.escape(field) + r"\[(\d+)\]", exc.message)
    if m is None or int(m.group(1)) >= len(rows):
        return exc
    row = rows[int(m.group(1))]
    item = names[row] if row < len(names) else f"{to or field}[{row}]"
    out = ApiError(exc.status, item + exc.message[m.end():], exc.type, to or exc.param, exc.code)
    out.served = exc.served
    return out


def refusal(message: str, field: str, offset: int) -> ApiError:
    """The front door's refusal of one row ("row N: ...", N in a call of the items from `offset` on)
    -> a 400 naming the request's item, `field[offset + N]`."""
    row = _ROW.search(message)
    return ApiError(400, f"{field}[{offset + int(row.group(1))}]: {row.group(2)}" if row else message, param=field)

