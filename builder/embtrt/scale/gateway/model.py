"""The gateway's model of one repository, of every kind (`GatewayModel`): its served record, its pools,
admission, the upstream, a request's items sent to the front door in parts of at most its max batch
(concurrently, back in order), the front door's refusal of one row as a 400 naming the request's item,
usage metrics, readiness and the /v1/models entry. How requests reach the model's buckets is its kind's
routing part (Kind.routing): the front door (front_door.Door) or length pools (length_pools.LengthPools:
texts to the front door, token ids to each bucket's encoder). A kind writes
what it sends and what comes back (`inputs`, `unpack`), its probe, its facts and the methods of its
operations (embtrt.kinds.<kind>.scale)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable

import numpy as np
from embtrt_backend.kinds import Kind

from .admission import Admission, AdmissionConfig
from .config import GatewayConfig, model_pools
from .errors import ApiError
from .front_door import Door, refusal, renamed
from .length_pools import LengthPools
from .metrics import Metrics
from .operations import operations
from .upstream import Upstream


class GatewayModel:
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
    # its kind as this build serves it (bge-m3: the multi-vector kind with more operations), once, at start
    def as_built(self) -> Kind: return type(self).kind

    served_as: Callable[[Path], Any]   # its served record (served.py) from the repository

    def __init__(self, cfg: GatewayConfig, repository: Path | None = None, metrics: Metrics | None = None,
                 upstream: Upstream | None = None, several: bool = False, admission: Admission | None = None) -> None:
        self.cfg = cfg
        self.admission = admission or Admission(AdmissionConfig())
        self.served = served = self.served_as(Path(repository or cfg.repository))
        self.kind = self.as_built()
        self.pools = model_pools(cfg, served.name, served.buckets, several)
        self.pool = self.pools[0]   # the one that holds the front door
        self.metrics = metrics or Metrics()
        self.upstream = upstream or Upstream(cfg.attempts, cfg.timeout_s, self.metrics, tls_ca=cfg.pool_tls_ca)
        # its kind's routing part (Kind.routing): the front door, or length pools
        self.routing: Door | LengthPools = (LengthPools if self.kind.length_pools else Door)(self)

    @property
    def refused_operations(self) -> frozenset[str]:
        """Operations of its kind this build refuses (an embedder whose pooling is inside its graph: token vectors)."""
        return frozenset()

    @property
    def route(self) -> str:
        """How texts go up now: "frontdoor", "ids" or "text" (the routing's; --route auto settles at run time)."""
        return self.routing.route

    async def ready(self) -> dict[str, str]:
        """{pool: 'ok' | reason}: each pool answers a real inference (the routing's probe)."""
        return await self.routing.ready()

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

    def describe(self) -> dict:
        """This model's /v1/models entry."""
        s = self.served
        return {"id": s.name, "object": "model", "created": 0, "owned_by": "embtrt", "kind": self.kind.name,
                "embtrt": s.identity, **self.facts(),
                "routes": [path for op in self.kind.operations if op not in self.refused_operations
                           for path in operations()[op].routes]}


