"""Typed errors. The CLI maps each class to an exit code and prints message and hint."""

from __future__ import annotations


class EmbtrtError(Exception):
    """Root error: a message for the user and a hint on what to do next."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nhint: {self.hint}"


class SpecError(EmbtrtError):
    """A build or serve option is invalid; the message names the field and allowed values."""

    exit_code = 2


class ModelError(EmbtrtError):
    """The model folder cannot be read or is not an embedding model we can handle."""

    exit_code = 3


class ParityError(EmbtrtError):
    """An artifact's vectors differ from the reference beyond the gate."""

    exit_code = 4


class RepositoryError(EmbtrtError):
    """A generated repository failed its consistency check."""

    exit_code = 5


class ServerError(EmbtrtError):
    """tritonserver could not be found, started, or did not become ready."""

    exit_code = 6


class ClientError(EmbtrtError):
    """A request to a served model failed."""

    exit_code = 7


class DependencyError(EmbtrtError):
    """An optional dependency (TensorRT, CUDA) is missing for the requested step."""

    exit_code = 8
