"""The build stage: spec, model export, precision, TensorRT engines, render, bundle, the gate.
`embtrt build` runs `build()`; `embtrt engines` runs `onnx2trt.build_engines()` on the GPU host."""

from .pipeline import BuildResult, build

__all__ = ["build", "BuildResult"]
