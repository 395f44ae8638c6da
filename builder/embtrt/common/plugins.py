"""A kind's implementation of a layer, by the name its Kind gives it (embtrt_backend.kinds:
`build`, `gateway_model`, ...: "module:attribute" or "module:Class.attribute"), imported on first
use. The layer that asks names the layer, never the kind: a new kind is wired by its Kind, not by
another branch here."""

from __future__ import annotations

import importlib
from functools import reduce
from typing import Any

from embtrt_backend.kinds import Kind


def resolve(ref: str) -> Any:
    """The object a "module:attribute" (or "module:Class.attribute") name refers to, its module imported."""
    module, _, attr = ref.partition(":")
    return reduce(getattr, attr.split("."), importlib.import_module(module))


def implementation(kind: Kind, layer: str) -> Any:
    """The object `kind.<layer>` names; LookupError where the kind has none for that layer."""
    ref = getattr(kind, layer)
    if not ref:
        raise LookupError(f"{kind.label} has no {layer} (embtrt_backend.kinds: {kind.name})")
    return resolve(ref)
