"""The gateway's model of a kind whose front door plans every bucket itself (a reranker, a sparse
encoder): one pool that holds the front door, admission, the upstream, a request's items sent in
parts of at most the front door's max batch (concurrently, back in order), the front door's refusal
of one row as a 400 naming the request's item, usage metrics, the readiness probe and the
/v1/models entry. A kind writes what it sends and what comes back (`inputs`, `unpack`), its probe
and its facts (embtrt.kinds.reranker.scale, embtrt.kinds.sparse.scale)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
from embtrt_backend.kinds import Kind

from ...errors import SpecError
from . import tracing
from .admission import Admission, AdmissionConfig
from .config import GatewayConfig, model_pools
from .errors import ApiError
from .metrics import Metrics
from .operations import operations
from .upstream import Upstream

_ROW = re.compile(r"\brow (\d+): (.*)$", re.S)   # the front door's refusal of one row


class FrontDoorModel:
    kind: Kind          # its kind (embtrt_backend.kinds)
    does = ""           # what its front door does for every item ("scores every pair")
    outputs: tuple[str, ...] = ()   # the front door's outputs asked for, TOKENS last
    probe: tuple[Any, list] = (None, [])   # the readiness probe: (how, items)
    image_probe: Any = None   # a kind whose input takes images: how the probe image (images.PROBE_PNG) is sent after it
    value = ""          # what a row holds, in the probe's reason ("non-finite score")

    def inputs(self, items: list, how: Any) -> list: raise NotImplementedError   # a call's input tensors
    # a call's outputs but TOKENS -> its rows (raises a 502 on a wrong shape)
    def unpack(self, items: list, outs: tuple) -> Any: raise NotImplementedError
    def finite(self, rows: Any) -> bool: return bool(np.all(np.isfinite(rows)))
    def facts(self) -> dict: return {}   # its /v1/models entry beside the shared fields
    def asked(self, how: Any) -> tuple[str, ...]: return self.outputs   # a call's outputs, TOKENS last

    served_as: Callable[[Path], Any]   # its served record (served.py) from the repository

    def __init__(self, cfg: GatewayConfig, repository: Path | None = None, metrics: Metrics | None = None,
                 upstream: Upstream | None = None, several: bool = False, admission: Admission | None = None) -> None:
        self.cfg = cfg
        self.admission = admission or Admission(AdmissionConfig())
        self.served = served = self.served_as(Path(repository or cfg.repository))
        name = served.name
        self.pools = model_pools(cfg, name, served.buckets, several)
        if len(self.pools) > 1:
            raise SpecError(f"{name} is {self.kind.label}: its front door {self.does}, so all its buckets must be "
                            f"in one pool, not {len(self.pools)}",
                            "give its buckets the same --pool replicas, or --triton HOST:PORT")
        self.pool = self.pools[0]
        self.route = "frontdoor"
        self.metrics = metrics or Metrics()
        self.upstream = upstream or Upstream(cfg.attempts, cfg.timeout_s, self.metrics, tls_ca=cfg.pool_tls_ca)

    async def send(self, items: list, how: Any, params: dict | None, field: str) -> tuple[list, int]:
        """A request's items to the front door in parts of at most its max batch (their sizes observed),
        concurrently -> (each part's rows, in order; the tokens, as the front door counts them)."""
        mb = self.served.max_batch_size
        parts = [items[i:i + mb] for i in range(0, len(items), mb)]
        rows = self.metrics.of(self.metrics.call_rows, self.pool.name, "frontdoor")
        for p in parts:
            rows.observe(len(p))
        done = await asyncio.gather(*(self.call(p, how, params, field, k * mb) for k, p in enumerate(parts)))
        tokens = sum(int(d[1].sum()) for d in done)
        self.metrics.count(self.pool.name, len(items), tokens)
        return [d[0] for d in done], tokens

    async def send_items(self, texts: list, media: tuple, how: Callable[[str], Any], params: dict | None,
                         field: str, names: tuple[str, ...] = ()) -> tuple[np.ndarray, int]:
        """A kind taking images: items in input order, `media[k]` an image's encoded bytes, a Fused image (texts[k] goes
        with it: one input) or None (texts[k] is a text; `media` empty: every item a text) -> (their rows in input order,
        the tokens the front door counts). Texts, images and fused pairs go up in calls of their own (`how("TEXT")`,
        `how("IMAGE")`, `how("TEXT+IMAGE")`: Triton gives every input of a request one batch size), concurrently; the
        texts' characters are admitted first; a refused item is a 400 naming `field[k]` (or `names[k]`)."""
        from .images import Fused

        n, image = len(texts), self.kind.image_input
        fused = f"TEXT+{image}"   # a text fused with an image (images.Fused): both inputs in one row
        at = {"TEXT": [k for k in range(n) if not media or media[k] is None],
              image: [k for k in range(n) if media and media[k] is not None and not isinstance(media[k], Fused)],
              fused: [k for k in range(n) if media and isinstance(media[k], Fused)]}
        self.admission.check_chars([texts[k] for k in at["TEXT"] + at[fused]])

        async def run(modality: str, rows: list[int]) -> tuple[np.ndarray | None, int]:
            if not rows:
                return None, 0
            values = [texts[k] if modality == "TEXT" else (texts[k], media[k].image) if modality == fused else media[k]
                      for k in rows]
            try:
                parts, tokens = await self.send(values, how(modality), params, field)
            except ApiError as exc:
                raise renamed(exc, field, rows, names=names) from None
            return np.concatenate(parts), tokens

        done = await asyncio.gather(*(run(m, rows) for m, rows in at.items()))
        first = next(r for r, _ in done if r is not None)
        out = np.empty((n, *first.shape[1:]), dtype=first.dtype)
        for rows, (r, _) in zip(at.values(), done):
            if r is not None:
                out[rows] = r
        return out, sum(t for _, t in done)

    async def call(self, items: list, how: Any, params: dict | None, field: str, offset: int = 0) -> tuple[Any, np.ndarray]:
        """One call of items (the request's from `offset` on) -> (their rows, each item's tokens). An item
        the front door refuses (INVALID_ARG, "row N: ...") is a 400 naming `field[offset + N]`."""
        try:
            *outs, tokens = await self.upstream.calls(self.pool, 0, self.served.name, self.inputs(items, how),
                                                      self.asked(how), params or None)
        except ApiError as exc:
            if exc.status != 400:
                raise
            raise refusal(exc.message, field, offset) from None
        return self.unpack(items, tuple(outs)), tokens.reshape(-1)

    async def ready(self) -> dict[str, str]:
        """The pool must answer the probe with finite values, and (a kind taking images) the probe image too;
        {pool: 'ok' | reason}."""
        try:
            rows, _ = await self.call(self.probe[1], self.probe[0], None, "input")
            state = "ok" if self.finite(rows) else f"non-finite {self.value}"
        except ApiError as exc:
            state = exc.message
        if state == "ok" and self.image_probe is not None:
            from embtrt_backend.images import PROBE_PNG

            try:
                rows, _ = await self.call([PROBE_PNG], self.image_probe, None, "input")
                state = "ok" if self.finite(rows) else f"non-finite {self.value} of an image"
            except ApiError as exc:
                state = f"image probe: {exc.message}"
        return {self.pool.name: state}

    def describe(self) -> dict:
        """This model's /v1/models entry."""
        s = self.served
        return {"id": s.name, "object": "model", "created": 0, "owned_by": "embtrt", "kind": self.kind.name,
                "embtrt": s.identity, **self.facts(), "routes": [path for op in self.kind.operations for path in operations()[op].routes]}


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

