"""The bundle's record: which Python packages each generated Python model imports, where the
bundle lives in a repository and which Python it was built for. The build writes bundles
(embtrt.export.bundle); the check and the models' load-time guard read this record."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import SpecError

DEPS_DIR = "_deps"
BUNDLE_META = "embtrt_bundle.json"
MODEL_DEPS = "embtrt_deps.json"  # in each Python model's 1/ folder
# pip distribution -> the module it provides
PACKAGES = {"tokenizers": "tokenizers", "onnxruntime": "onnxruntime", "openvino": "openvino", "pillow": "PIL"}
# The encoder runtime each python-* target imports; PyTorch (python-torch) is far too large to
# bundle (a CUDA build from PyPI), so it must be in the server's Python, which the models check.
RUNTIME = {"python-ort": ["onnxruntime"], "python-openvino": ["openvino"], "python-torch": []}
EXPECTED = {"python-torch": ["torch", "transformers"]}


def python_tag(py: str) -> str:
    major, minor = py.split(".")
    return f"cp{major}{minor}"


def parse_python(value: str | None) -> str:
    if value is None:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    parts = value.strip().split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts) or parts[0] != "3" or not 8 <= int(parts[1]) <= 14:
        raise SpecError(f"invalid server_python: {value!r}", "a CPython version such as 3.12 (3.8 .. 3.14)")
    return f"{parts[0]}.{int(parts[1])}"


def packages_for(target: str, extra: tuple[str, ...] = ()) -> list[str]:
    """What the target's Python-backend models import besides numpy (which the server has), and the
    kind's own (`extra`: Pillow for an image model)."""
    return ["tokenizers", *extra, *RUNTIME.get(target, [])]


def model_requires(kind: str, target: str, local_encoder: bool, extra: tuple[str, ...] = ()) -> list[str]:
    """Modules one model imports: kind is front door, tokenizer, encoder or pooler; `extra`: the pip
    distributions the model's kind adds to its front door (Kind.packages)."""
    runtime = [PACKAGES[p] for p in RUNTIME.get(target, [])] + EXPECTED.get(target, [])
    if kind == "front door":
        return ["tokenizers"] + [PACKAGES[p] for p in extra] + (runtime if local_encoder else [])
    if kind == "tokenizer":
        return ["tokenizers"]
    if kind == "encoder" and target in RUNTIME:
        return runtime
    return []


def bundle_python_tags(folder: Path) -> set[str]:
    """The CPython tags of the compiled modules in a bundle (cpython-311-... -> cp311); abi3 is any."""
    tags = set()
    for so in folder.rglob("*.so"):
        parts = so.name.split(".")
        if len(parts) >= 3 and parts[-2].startswith("cpython-"):
            ver = parts[-2].split("-")[1]
            tags.add(f"cp{ver}")
    return tags
