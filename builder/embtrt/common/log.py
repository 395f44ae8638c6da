"""The progress callback every long step takes."""

from __future__ import annotations

from typing import Callable

Log = Callable[[str], None]
