"""Make a mypy-readable copy of the `tensorrt-stubs` wheel's stubs.

The wheel (10.13) ships `tensorrt/` and `tensorrt_bindings/` as .pyi files without
py.typed, so mypy ignores them in site-packages, and two signatures are not valid Python
(a parameter named `in`; non-default parameters after defaults). We copy them to DEST,
rename `in` to `in_` and give such parameters `= ...`, then point MYPYPATH at DEST.

    python tests/typecheck/prepare_trt_stubs.py DEST
"""

from __future__ import annotations

import ast
import re
import shutil
import sys
from pathlib import Path


def _fix_defaults(line: str) -> str:
    m = re.match(r"^(\s*def \w+\()(.*)(\)\s*->.*)$", line)
    if not m:
        return line
    params, seen_default = [], False
    depth, cur = 0, ""
    for ch in m.group(2):  # split on top-level commas
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            params.append(cur)
            cur = ""
        else:
            cur += ch
    params.append(cur)
    out = []
    for p in params:
        if "=" in p:
            seen_default = True
        elif seen_default and p.strip() and not p.strip().startswith("*"):
            p = p + " = ..."
        out.append(p)
    return m.group(1) + ",".join(out) + m.group(3)


def prepare(dest: Path) -> Path:
    import importlib.util

    spec = importlib.util.find_spec("tensorrt_stubs")
    if spec is None or spec.origin is None:
        raise SystemExit("tensorrt-stubs is not installed: pip install --no-deps tensorrt-stubs")
    site = Path(spec.origin).parent.parent
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for pkg in ("tensorrt", "tensorrt_bindings"):
        shutil.copytree(site / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for f in dest.rglob("*.pyi"):
        text = re.sub(r"([(,]\s*)in:", r"\1in_:", f.read_text())
        text = "\n".join(_fix_defaults(line) for line in text.splitlines()) + "\n"
        ast.parse(text, str(f))  # must now be valid Python
        f.write_text(text)
    return dest


if __name__ == "__main__":
    print(prepare(Path(sys.argv[1] if len(sys.argv) > 1 else ".mypy-stubs")))
