"""Each kind's front door without Triton (embtrt_backend.kinds.<kind>.door, on doors.base), chosen by the kind."""

from __future__ import annotations

from importlib import import_module

from ..kinds import Kind
from .base import Door, Item, Outputs


def door_for(kind: Kind, here: str, p: dict[str, str]) -> Door:
    """The front door of `kind` for the model version folder `here` and its config parameters."""
    module = import_module(f"..kinds.{kind.name}.door", __package__)
    return getattr(module, kind.door)(here, p)


__all__ = ["Door", "Item", "Outputs", "door_for"]
