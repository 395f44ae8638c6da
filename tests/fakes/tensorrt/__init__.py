"""A stand-in for the `tensorrt` module on a machine without TensorRT or a GPU.

Only what embtrt.onnx2trt calls, with the real API's names (tests/unit/test_tensorrt_names.py
checks every public name here against the real tensorrt-cu12-bindings 10.13 and 11.4
wheels). It records what the builder receives and "builds" a plan that holds the parsed
ONNX file's bytes, so a test runner can execute the plan with ONNX Runtime and the whole
engines path around TensorRT runs for real. Like TensorRT 11, it has no precision builder
flags and refuses a network that is not strongly typed.
"""

from __future__ import annotations

import json
from pathlib import Path

__version__ = "11.4.0.fake"
CALLS: list[tuple] = []  # (what, details), in call order


class Logger:
    WARNING = 2

    def __init__(self, severity: int = 2) -> None:
        self.severity = severity


class NetworkDefinitionCreationFlag:
    STRONGLY_TYPED = 1


class MemoryPoolType:
    WORKSPACE = 0


class BuilderFlag:  # TensorRT 11.4's enum starts like this; it has no precision member
    DEBUG = 0
    GPU_FALLBACK = 1
    TF32 = 6             # both 10.13 and 11.4 keep it (on by default); the value is this stand-in's own


class Dims(tuple):
    pass


class IOptimizationProfile:
    def __init__(self) -> None:
        self.shapes: dict[str, tuple] = {}

    def set_shape(self, name: str, min: Dims, opt: Dims, max: Dims) -> None:  # noqa: A002 - the real keywords
        self.shapes[name] = (tuple(min), tuple(opt), tuple(max))


class ITimingCache:
    def __init__(self, blob: bytes) -> None:
        self.blob = bytes(blob) or b"fake-timing-cache"

    def serialize(self) -> bytes:
        return self.blob


class IBuilderConfig:
    def __init__(self) -> None:
        self.pools: dict[int, int] = {}
        self.flags: list[int] = []
        self.cleared: list[int] = []
        self.builder_optimization_level = 3
        self.profiles: list[IOptimizationProfile] = []
        self._cache: ITimingCache | None = None

    def set_memory_pool_limit(self, pool: int, pool_size: int) -> None:
        self.pools[pool] = pool_size

    def set_flag(self, flag: int) -> None:
        self.flags.append(flag)

    def clear_flag(self, flag: int) -> None:
        self.cleared.append(flag)

    def add_optimization_profile(self, profile: IOptimizationProfile) -> int:
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def create_timing_cache(self, serialized_timing_cache: bytes) -> ITimingCache:
        return ITimingCache(serialized_timing_cache)

    def set_timing_cache(self, cache: ITimingCache, ignore_mismatch: bool) -> bool:
        self._cache = cache
        return True

    def get_timing_cache(self) -> ITimingCache:
        assert self._cache is not None
        return self._cache


class INetworkDefinition:
    def __init__(self, flags: int) -> None:
        self.flags = flags
        self.onnx: Path | None = None


class OnnxParser:
    def __init__(self, network: INetworkDefinition, logger: Logger) -> None:
        self.network = network
        self.errors: list[str] = []

    @property
    def num_errors(self) -> int:
        return len(self.errors)

    def get_error(self, index: int) -> str:
        return self.errors[index]

    def parse_from_file(self, model: str) -> bool:
        import onnx

        try:
            onnx.checker.check_model(model)
        except Exception as exc:  # the real parser reports errors through get_error
            self.errors.append(str(exc))
            return False
        self.network.onnx = Path(model)
        return True


class Builder:
    def __init__(self, logger: Logger) -> None:
        self.logger = logger

    def create_network(self, flags: int = 0) -> INetworkDefinition:
        CALLS.append(("create_network", flags))
        return INetworkDefinition(flags)

    def create_builder_config(self) -> IBuilderConfig:
        return IBuilderConfig()

    def create_optimization_profile(self) -> IOptimizationProfile:
        return IOptimizationProfile()

    def build_serialized_network(self, network: INetworkDefinition, config: IBuilderConfig) -> bytes | None:
        if not network.flags & (1 << NetworkDefinitionCreationFlag.STRONGLY_TYPED):
            raise RuntimeError("fake TensorRT: networks must be strongly typed")
        if config.flags:
            raise RuntimeError(f"fake TensorRT: unexpected builder flags {config.flags}")
        assert network.onnx is not None and len(config.profiles) == 1
        CALLS.append(("build", {"onnx": str(network.onnx), "shapes": config.profiles[0].shapes,
                                "workspace": config.pools.get(MemoryPoolType.WORKSPACE),
                                "opt_level": config.builder_optimization_level, "cleared": list(config.cleared)}))
        header = json.dumps({"fake_plan_of": str(network.onnx), "shapes": config.profiles[0].shapes}).encode()
        return header + b"\n" + network.onnx.read_bytes()
