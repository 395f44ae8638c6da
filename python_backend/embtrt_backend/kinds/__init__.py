"""The registry of kinds: every `Kind` by name, in the order messages list them.

Adding a kind is adding its module here (and its column in each layer that asks it: docs/kinds.md).
Only this package spells a kind's name; everything else names a kind through it.
"""

from __future__ import annotations

from .base import Kind
from .classifier import KIND as CLASSIFIER
from .embedder import KIND as EMBEDDER
from .multimodal import KIND as MULTIMODAL
from .multivector import KIND as MULTIVECTOR
from .reranker import KIND as RERANKER
from .sparse import KIND as SPARSE

KINDS: tuple[Kind, ...] = (EMBEDDER, RERANKER, SPARSE, CLASSIFIER, MULTIVECTOR, MULTIMODAL)
BY_NAME: dict[str, Kind] = {k.name: k for k in KINDS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
DEFAULT = EMBEDDER   # a manifest or front door from before kinds (schema 1 and 2) is an embedder's


def kind_of(name: str | None) -> Kind:
    """The kind named `name` (None or "": the default, as configs from before kinds say nothing);
    ValueError naming the kinds for an unknown one."""
    if not name:
        return DEFAULT
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown kind of model {name!r}: one of {', '.join(NAMES)}") from None


__all__ = ["CLASSIFIER", "DEFAULT", "EMBEDDER", "KINDS", "MULTIMODAL", "MULTIVECTOR", "NAMES", "RERANKER", "SPARSE", "BY_NAME",
           "Kind", "kind_of"]
