"""embtrt's TensorRT code uses only names that both TensorRT 10.13 and the newest 11.x expose.

Reads the real `tensorrt-cu12-bindings` wheels (pip download --no-deps; cached under
.venv/trt-bindings), see tests/typecheck/trt_names.py for how names are read from them.
"""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "typecheck"))
import trt_names  # noqa: E402

ONNX2TRT = ROOT / "builder" / "embtrt" / "export" / "onnx2trt.py"


@pytest.fixture(scope="module")
def bindings():
    cache = Path(sys.prefix) / "trt-bindings"
    return {v: trt_names.Bindings(w) for v, w in trt_names.fetch_wheels(cache).items()}


def test_both_bindings_versions_are_read(bindings):
    assert set(bindings) == {"10.13.3.9.post1", "11.4.0.106"}
    b10, b11 = bindings["10.13.3.9.post1"], bindings["11.4.0.106"]
    for name in ("Builder", "OnnxParser", "STRONGLY_TYPED", "set_memory_pool_limit", "create_timing_cache"):
        assert b10.has(name) and b11.has(name), name
    # what NVIDIA's migration guide says, seen in the real wheels: 10.13 still has the weak-typing
    # names, 11.4 has none of them
    for name in ("OBEY_PRECISION_CONSTRAINTS", "int8_calibrator", "IInt8EntropyCalibrator2", "platform_has_fast_fp16"):
        assert b10.has(name) and not b11.has(name), name
    assert b10.has("FP16") and not b11.has("FP16")


def test_the_tensorrt_module_uses_only_names_both_versions_have(bindings):
    src = ONNX2TRT.read_text()
    used = trt_names.used_names(src)
    assert {"NetworkDefinitionCreationFlag.STRONGLY_TYPED", "create_network", "set_shape", "build_serialized_network",
            "get_timing_cache", "parse_from_file", "num_errors"} <= used
    assert trt_names.problems(src, bindings) == []


@pytest.mark.parametrize("planted,expect", [
    ("    config.set_flag(trt.BuilderFlag.FP16)\n", "BuilderFlag.FP16: not in tensorrt-cu12-bindings 11.4.0.106"),
    ("    config.int8_calibrator = None\n", "int8_calibrator: removed in TensorRT 11"),
    ("    config.set_flag(trt.BuilderFlag.INT8)\n", "BuilderFlag.INT8: removed in TensorRT 11"),
    ("    config.set_flags(0)\n", "set_flags: not in tensorrt-cu12-bindings 10.13.3.9.post1"),
])
def test_a_planted_removed_or_unknown_name_fails_the_check(bindings, planted, expect):
    src = ONNX2TRT.read_text()
    anchor = "    config.builder_optimization_level = recipe.builder_opt_level\n"
    assert anchor in src
    bad = trt_names.problems(src.replace(anchor, anchor + planted), bindings)
    assert any(p.startswith(expect) for p in bad), bad


def _public_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                    names.add(item.name)
                elif isinstance(item, ast.Assign):
                    names.update(t.id for t in item.targets if isinstance(t, ast.Name) and not t.id.startswith("_"))
    return names - {"CALLS"}


def test_the_tensorrt_stand_in_only_has_names_of_the_real_bindings(bindings):
    fake = _public_names(ROOT / "tests" / "fakes" / "tensorrt" / "__init__.py")
    assert {"Builder", "OnnxParser", "IBuilderConfig", "STRONGLY_TYPED", "set_timing_cache"} <= fake
    missing = {v: sorted(n for n in fake if not b.has(n)) for v, b in bindings.items()}
    assert missing == {v: [] for v in bindings}


def test_the_nvml_stand_in_matches_the_real_pynvml():
    import pynvml

    fake = ast.parse((ROOT / "tests" / "fakes" / "nvml" / "pynvml.py").read_text())
    names = {n.name for n in fake.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert names and all(hasattr(pynvml, n) for n in names), sorted(n for n in names if not hasattr(pynvml, n))
