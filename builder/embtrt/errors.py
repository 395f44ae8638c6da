"""Typed errors. The CLI maps each class to an exit code and prints message and hint."""

from __future__ import annotations

import importlib.util


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


class BadRequestError(ClientError):
    """The server refused the request as bad input or bad options (INVALID_ARGUMENT): the caller's to fix."""

    exit_code = 2


class DependencyError(EmbtrtError):
    """An optional dependency (TensorRT, CUDA) is missing for the requested step."""

    exit_code = 8


# What each install extra brings, for the message of a command run without it.
EXTRA_PURPOSE = {
    "build": "PyTorch, transformers, sentence-transformers, ONNX and ONNX Runtime",
    "tensorrt": "TensorRT, NVML, Polygraphy and ONNX Runtime",
    "server": "a tritonserver (the nvidia-pytriton wheel)",
    "openvino": "OpenVINO",
}


def require_extra(extra: str, command: str, *modules: str) -> None:
    """Fail at once, with the pip command, when a module of `extra` is not installed.

    Called at the start of a command, before any work, so a base install (no PyTorch) answers
    `embtrt build` with a hint instead of an ImportError traceback halfway through."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise DependencyError(
            f"`embtrt {command}` needs {EXTRA_PURPOSE.get(extra, extra)}; not installed here: {', '.join(missing)}",
            f"pip install 'embtrt[{extra}]'")
