"""Triton's model_config.proto as Python, for every config embtrt writes or reads.

tritonclient ships it generated (`tritonclient.grpc.model_config_pb2`). It is imported through
`tritonclient.grpc` where tritonclient's gRPC client imports; where it does not (no grpcio, or a
dependency of the client missing, as where the GPU kit carries tritonclient's files alone), that
package refuses to import, and the generated module, which needs protobuf only, is loaded from its
file on its own, under the same name, so it is never registered twice in protobuf's descriptor pool."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

NAME = "tritonclient.grpc.model_config_pb2"


def _load() -> ModuleType:
    try:
        from tritonclient.grpc import model_config_pb2

        return model_config_pb2
    except (RuntimeError, ImportError):   # tritonclient.grpc without a working gRPC ("The installation does not
        pass                              # include grpc support"): the generated module alone
    if NAME in sys.modules:
        return sys.modules[NAME]
    root = importlib.util.find_spec("tritonclient")
    if root is None or not root.submodule_search_locations:
        raise ImportError("tritonclient is not installed (embtrt reads Triton's model_config.proto from it)")
    path = f"{list(root.submodule_search_locations)[0]}/grpc/model_config_pb2.py"
    spec = importlib.util.spec_from_file_location(NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    spec.loader.exec_module(module)
    return module


model_config_pb2 = _load()


def grpc_service() -> tuple[ModuleType, ModuleType]:
    """(service_pb2, service_pb2_grpc): KServe v2's gRPC messages and stubs, for a client that builds its
    requests itself (embtrt.measure.loadgen). Through `tritonclient.grpc` where it imports; else (the GPU kit:
    tritonclient's files and the host's grpcio, none of the client's other dependencies) loaded from their
    files under a bare `tritonclient.grpc` package, after model_config_pb2 (which service_pb2 imports)."""
    try:
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        return service_pb2, service_pb2_grpc
    except (RuntimeError, ImportError):
        pass
    import grpc  # noqa: F401  (the stubs need it; its ImportError is the caller's message)

    root = importlib.util.find_spec("tritonclient")
    if root is None or not root.submodule_search_locations:
        raise ImportError("tritonclient is not installed (its gRPC service stubs are)")
    folder = f"{list(root.submodule_search_locations)[0]}/grpc"
    if "tritonclient.grpc" not in sys.modules or not hasattr(sys.modules["tritonclient.grpc"], "__path__"):
        pkg = ModuleType("tritonclient.grpc")
        pkg.__path__ = [folder]
        sys.modules["tritonclient.grpc"] = pkg
    pkg = sys.modules["tritonclient.grpc"]
    pkg.model_config_pb2 = model_config_pb2  # type: ignore[attr-defined]
    mods = []
    for name in ("service_pb2", "service_pb2_grpc"):
        full = f"tritonclient.grpc.{name}"
        if full not in sys.modules:
            spec = importlib.util.spec_from_file_location(full, f"{folder}/{name}.py")
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {folder}/{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[full] = module
            spec.loader.exec_module(module)
            setattr(pkg, name, module)
        mods.append(sys.modules[full])
    return mods[0], mods[1]
