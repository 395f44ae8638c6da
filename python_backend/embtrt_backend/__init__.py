"""Serving-side logic of embtrt's Python-backend models (no Triton imports here)."""


class InputError(ValueError):
    """A request's content is invalid; the request fails, the model keeps serving."""
