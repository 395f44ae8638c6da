"""What the gateway of a reranker and of a sparse encoder share (`FrontDoorModel`): one pool that
holds the model's front door (which plans every bucket itself), admission, the upstream, a
request's items sent in parts of at most the front door's max batch, and the front door's refusal
of one row as a 400 naming the request's item."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from embtrt_backend.kinds import Kind

from ...errors import SpecError
from .admission import Admission, AdmissionConfig
from .config import GatewayConfig, model_pools
from .errors import ApiError
from .metrics import Metrics
from .upstream import Upstream

_ROW = re.compile(r"\brow (\d+): (.*)$", re.S)   # the front door's refusal of one row


class FrontDoorModel:
    kind: Kind          # its kind (embtrt_backend.kinds)
    does = ""           # what its front door does for every item ("scores every pair")

    def __init__(self, cfg: GatewayConfig, served: Any, metrics: Metrics | None = None,
                 upstream: Upstream | None = None, several: bool = False, admission: Admission | None = None) -> None:
        self.cfg = cfg
        self.admission = admission or Admission(AdmissionConfig())
        self.served = served
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

    def parts(self, items: list) -> list[list]:
        """The request's items in calls of at most the front door's max batch (their sizes observed)."""
        mb = self.served.max_batch_size
        parts = [items[i:i + mb] for i in range(0, len(items), mb)]
        rows = self.metrics.of(self.metrics.call_rows, self.pool.name, "frontdoor")
        for p in parts:
            rows.observe(len(p))
        return parts


def refusal(message: str, field: str, offset: int) -> ApiError:
    """The front door's refusal of one row ("row N: ...", N in a call of the items from `offset` on)
    -> a 400 naming the request's item, `field[offset + N]`."""
    row = _ROW.search(message)
    return ApiError(400, f"{field}[{offset + int(row.group(1))}]: {row.group(2)}" if row else message, param=field)


def repository_of(cfg: GatewayConfig, repository: Path | None) -> Path:
    return Path(repository or cfg.repository)
