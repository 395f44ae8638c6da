"""Parsing of list-valued command-line options, shared by every command."""

from __future__ import annotations

from ..errors import SpecError


def parse_int_list(fieldname: str, text: str | None) -> tuple[int, ...] | None:
    if text is None or text.strip() == "":
        return None
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError as exc:
        raise SpecError(f"invalid {fieldname}: {text!r}", "allowed: comma-separated integers, e.g. 32,128,256") from exc
