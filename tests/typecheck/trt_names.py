"""Which TensorRT Python names does a module use, and do the real bindings have them?

The `tensorrt-cu12-bindings` wheels are real 1.3 MB wheels (their module cannot import
without libnvinfer, which is not on this machine), and every Python name the module
exposes is a string in `tensorrt_bindings/tensorrt.so`: pybind11 registers classes, methods,
properties and enum members by C string. The linker merges a string into the tail of a longer
one ("Builder" lives inside "IExprBuilder", "num_errors" inside "get_num_errors"), so a name is
present when it is a whole string that is an identifier, or the tail of one that starts where a
part of the identifier starts (after "_", at a lower-to-upper case change, or at the last
capital of a run of capitals before a lower-case letter: "Logger" in "ILogger"). A piece of a
part never counts: "uilder" or "reate_network" are absent, and so is INT8 inside UINT8 (where
the linker merged the two, the check reports the name missing: loud, never silently passing).
The names that NVIDIA's 10 -> 11 migration guide lists as removed are refused outright as well.

    python tests/typecheck/trt_names.py builder/embtrt/export/onnx2trt.py WHEEL_DIR
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

# The bindings versions checked: the last 10.x line with tensorrt-stubs, and the newest 11.x.
VERSIONS = ("10.13.3.9.post1", "11.4.0.106")

# NVIDIA, "Migrating from TensorRT 10.x to 11.x", removed Python APIs (weak typing, implicit
# quantization), plus per-layer precision, which strong typing forbids.
REMOVED = (
    "BuilderFlag.FP16", "BuilderFlag.BF16", "BuilderFlag.INT8", "BuilderFlag.FP8", "BuilderFlag.INT4",
    "BuilderFlag.FP4", "BuilderFlag.OBEY_PRECISION_CONSTRAINTS", "BuilderFlag.PREFER_PRECISION_CONSTRAINTS",
    "BuilderFlag.DIRECT_IO", "int8_calibrator", "set_calibration_profile", "get_calibration_profile",
    "set_quantization_flag", "get_quantization_flag", "quantization_flags", "clear_quantization_flag",
    "QuantizationFlag", "IInt8Calibrator", "IInt8EntropyCalibrator", "IInt8EntropyCalibrator2",
    "IInt8MinMaxCalibrator", "IInt8LegacyCalibrator", "CalibrationAlgoType", "platform_has_fast_fp16",
    "platform_has_fast_int8", "platform_has_tf32", "IAlgorithmSelector", "algorithm_selector",
    "device_memory_size", "set_output_type", "reset_output_type", "precision", "reset_precision",
    "precision_is_set", "output_type_is_set", "EXPLICIT_BATCH",
)


def fetch_wheels(dest: Path) -> dict[str, Path]:
    """pip download --no-deps each checked version (cached in dest); {version: wheel}."""
    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for v in VERSIONS:
        found = sorted(dest.glob(f"tensorrt_cu12_bindings-{v}-*.whl"))
        if not found:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                            f"tensorrt-cu12-bindings=={v}", "-d", str(dest)], check=True)
            found = sorted(dest.glob(f"tensorrt_cu12_bindings-{v}-*.whl"))
        out[v] = found[0]
    return out


class Bindings:
    """The names one bindings wheel exposes: strings of tensorrt.so, and the Python files' names."""

    def __init__(self, wheel: Path) -> None:
        with zipfile.ZipFile(wheel) as z:
            so = z.read("tensorrt_bindings/tensorrt.so")
            py = [z.read(n).decode() for n in z.namelist() if n.startswith("tensorrt_bindings/") and n.endswith(".py")]
        self.strings = [s.decode("latin1") for s in so.split(b"\0") if s]
        self.py_names = set()
        for src in py:
            with warnings.catch_warnings():  # NVIDIA's own files have invalid escape sequences
                warnings.simplefilter("ignore")
                tree = ast.parse(src)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    self.py_names.add(node.name)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    self.py_names.add(node.id)
        names: set[str] = set()
        for s in self.strings:
            if _IDENT.fullmatch(s):
                names.update(s[i:] for i in range(len(s)) if _part_starts(s, i))
        self._names = names

    def has(self, name: str) -> bool:
        """A whole name of these bindings (a piece of a longer identifier's part does not count)."""
        return name in self.py_names or name in self._names


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _part_starts(word: str, i: int) -> bool:
    """Does a part of the identifier `word` start at i: its start, after '_', at a lower-case or digit
    to upper-case change, or at the last capital of a run followed by a lower-case letter?"""
    if i == 0 or word[i - 1] == "_":
        return True
    prev, cur = word[i - 1], word[i]
    if cur.isupper() and (prev.islower() or prev.isdigit()):
        return True
    return cur.isupper() and prev.isupper() and i + 1 < len(word) and word[i + 1].islower()


def _annotation_mentions_trt(node: ast.AST | None) -> bool:
    if node is None:
        return False
    text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ast.unparse(node)
    return "trt." in text


def used_names(source: str) -> set[str]:
    """Names the module takes from TensorRT: every `trt.A.B` chain (as 'A' and 'A.B'), and every
    attribute used on a value that came from TensorRT (parameters annotated with a trt type, and
    anything assigned from a trt-rooted expression), followed through each function."""
    tree = ast.parse(source)
    names: set[str] = set()

    def chain(node: ast.AST) -> list[str] | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id == "trt":
            return parts[::-1]
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            c = chain(node)
            if c:
                names.update(".".join(c[i:j]) for i in range(len(c)) for j in range(i + 1, len(c) + 1) if j - i <= 2)

    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        tainted = {a.arg for a in fn.args.args + fn.args.kwonlyargs if _annotation_mentions_trt(a.annotation)}

        def from_trt(expr: ast.AST, tainted: set[str] = tainted) -> bool:
            for sub in ast.walk(expr):
                if isinstance(sub, ast.Name) and (sub.id == "trt" or sub.id in tainted):
                    return True
            return False

        for stmt in ast.walk(fn):
            if isinstance(stmt, ast.Assign) and from_trt(stmt.value):
                for t in stmt.targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            tainted.add(n.id)
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in tainted:
                names.add(node.attr)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call) and from_trt(node.value):
                names.add(node.attr)  # config.get_timing_cache().serialize()
    return names


def problems(source: str, bindings: dict[str, Bindings]) -> list[str]:
    """Every used name that a checked version lacks, or that the migration guide removed."""
    out = []
    used = used_names(source)
    for name in sorted(used):
        if name in REMOVED or name.split(".")[-1] in REMOVED:
            out.append(f"{name}: removed in TensorRT 11 (NVIDIA's 10 -> 11 migration list)")
        for version, b in bindings.items():
            if not all(b.has(part) for part in name.split(".")):
                out.append(f"{name}: not in tensorrt-cu12-bindings {version}")
    return out


if __name__ == "__main__":
    wheels = fetch_wheels(Path(sys.argv[2] if len(sys.argv) > 2 else ".trt-bindings"))
    bad = problems(Path(sys.argv[1]).read_text(), {v: Bindings(w) for v, w in wheels.items()})
    print("\n".join(bad) or "ok: every TensorRT name is in " + ", ".join(wheels))
    sys.exit(1 if bad else 0)
