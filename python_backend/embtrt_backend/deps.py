"""Make a model's bundled Python packages importable, or fail its load with a clear message.

Only the standard library here: this runs before anything that needs the bundle. The build
writes `embtrt_deps.json` next to each model.py:
    {"requires": ["tokenizers", ...],
     "bundle": {"path": "../../NAME/_deps/cp311", "python": "3.11"} or null}
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

DEPS_FILE = "embtrt_deps.json"


class BundleError(RuntimeError):
    """The model cannot load in this Python: wrong bundle or missing packages."""


def use_bundle(here: str) -> str | None:
    """Put the repository's bundle first on sys.path (checking it was built for this Python) and
    check that every module the model imports can be found. Returns the bundle folder."""
    path = os.path.join(here, DEPS_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    where = sys.executable or "the Triton Python backend stub"
    bundle = spec.get("bundle")
    folder = None
    if bundle:
        folder = os.path.normpath(os.path.join(here, bundle["path"]))
        if bundle["python"] != running:
            raise BundleError(
                f"this repository's Python packages were bundled for Python {bundle['python']} ({folder}), but this "
                f"Triton Python backend runs Python {running} ({where}); rebuild the repository with "
                f"`embtrt build --server-python {running}`")
        if not os.path.isdir(folder):
            raise BundleError(f"the repository's bundled Python packages are missing: {folder} (copy the whole "
                              "repository, including each front-door model's _deps folder)")
        if folder not in sys.path:
            sys.path.insert(0, folder)
    missing = [m for m in spec.get("requires", []) if importlib.util.find_spec(m) is None]
    if missing:
        how = ("not in the repository's bundle either" if bundle else
               "the repository was built with --no-bundle-deps, so it does not carry them")
        raise BundleError(
            f"this model needs the Python package(s) {', '.join(missing)}, which the Triton Python backend's "
            f"Python {running} ({where}) does not have; {how}. Rebuild without --no-bundle-deps so the repository "
            "brings them, or install them into that Python")
    return folder
