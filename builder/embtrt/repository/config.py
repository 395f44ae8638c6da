"""Triton model configs, parsed with Triton's own model_config.proto (shipped in tritonclient)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf import text_format
if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2 as mc
else:
    from .proto import model_config_pb2 as mc   # without needing gRPC

from ..errors import RepositoryError


def parse_config(path: Path) -> mc.ModelConfig:
    cfg = mc.ModelConfig()
    try:
        text_format.Parse(path.read_text(encoding="utf-8"), cfg)
    except text_format.ParseError as exc:
        raise RepositoryError(f"{path}: not a valid Triton model config: {exc}") from exc
    return cfg


# the backend a platform runs on (Triton's platform names)
PLATFORM_BACKENDS = {"onnxruntime_onnx": "onnxruntime", "tensorrt_plan": "tensorrt", "pytorch_libtorch": "pytorch",
                     "tensorflow_savedmodel": "tensorflow", "tensorflow_graphdef": "tensorflow"}


def backends_needed(repo: Path) -> dict[str, list[str]]:
    """Triton backend -> the repository's models that run on it (ensembles run on none)."""
    out: dict[str, list[str]] = {}
    for path in sorted(Path(repo).glob("*/config.pbtxt")):
        cfg = parse_config(path)
        backend = cfg.backend or PLATFORM_BACKENDS.get(cfg.platform, "")
        if backend:
            out.setdefault(backend, []).append(cfg.name or path.parent.name)
    return out
