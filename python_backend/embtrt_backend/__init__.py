"""Serving-side logic of embtrt's Python-backend models (no Triton imports here)."""


class InputError(ValueError):
    """A request's content is invalid; the request fails, the model keeps serving. `param` names
    the request parameter at fault, where one is; `row` the item at fault, where one is."""

    def __init__(self, message: str, param: str | None = None, row: int | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.row = row
