"""The embedder's front door: the pooled-vector door (embtrt_backend.doors.pooled) as it is, on the
embedder's inputs."""

from __future__ import annotations

from ...doors.pooled import PooledDoor
from . import KIND as EMBEDDER


class EmbedderDoor(PooledDoor):
    inputs = EMBEDDER.inputs
