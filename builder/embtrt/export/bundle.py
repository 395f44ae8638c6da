"""The repository carries the Python packages its Python-backend models import.

NVIDIA's stock tritonserver images give the Python backend numpy and nothing else; the
generated models import `tokenizers` (every target) and the encoder runtime (python-*
targets). `embtrt build` installs those wheels, for the server's Python version and
platform (pip's --python-version / --platform / --only-binary), into `NAME/_deps/cpXY/`
inside the front-door model folder: Triton ignores a model folder's non-numeric
subfolders ("ignore version directory '_deps'"), while a top-level folder that is not a
model fails the whole load. Every Python model's `1/embtrt_deps.json` points there; its
model.py puts the folder first on sys.path and refuses, with both versions named, a bundle
built for another Python.

Bundles are cached per (packages, Python, platform) under ~/.cache/embtrt/bundles and
hard-linked into each repository. Their bytecode is hash-based (or absent for another Python), so a
repository's bytes do not depend on when its bundle was installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ..common.files import link_or_copy
from ..common.log import Log
from ..errors import DependencyError
from ..repository.bundle_record import BUNDLE_META, packages_for, parse_python, python_tag

# glibc baselines the wheels may target; stock Triton images are Ubuntu 22.04 / 24.04 (glibc 2.35+)
MANYLINUX = ("manylinux2014", "manylinux_2_17", "manylinux_2_27", "manylinux_2_28", "manylinux_2_31",
             "manylinux_2_34", "manylinux_2_35")


def _pins(names: list[str]) -> dict[str, str]:
    out = {}
    for n in names:
        try:
            out[n] = version(n)   # the exact version the build's gate ran here
        except PackageNotFoundError:
            raise DependencyError(f"cannot bundle {n}: it is not installed here", f"pip install {n}") from None
    return out


def _install(pins: dict[str, str], py: str, machine: str, dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--no-compile",
           "--only-binary=:all:", "--target", str(dest), "--python-version", py, "--implementation", "cp"]
    for tag in MANYLINUX:
        cmd += ["--platform", f"{tag}_{machine}"]
    cmd += [f"{n}=={v}" for n, v in pins.items()]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise DependencyError(f"pip could not fetch {', '.join(f'{n}=={v}' for n, v in pins.items())} for Python {py} "
                              f"on {machine}: {p.stderr.strip()[-600:]}",
                              "check the package index is reachable and has wheels for that Python, or build with "
                              "--no-bundle-deps and install the packages into the server's Python yourself")


def _compile(dest: Path, py: str) -> bool:
    """Bytecode for the bundle when the server's Python is this one: hash-based (PEP 552, checked), so
    it depends on the sources alone and two builds anywhere write the same bytes; pip's own would
    carry each source file's install time. For another Python: none (its stubs compile at import)."""
    if py != f"{sys.version_info.major}.{sys.version_info.minor}":
        return False
    import compileall
    import py_compile

    return bool(compileall.compile_dir(str(dest), quiet=2, workers=1,
                                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH))


def make_bundle(target: str, server_python: str, dest: Path, log: Log = print, extra: tuple[str, ...] = ()) -> dict:
    """Install the target's packages (and the kind's `extra`) for `server_python` into dest (via the cache);
    return the metadata."""
    py = parse_python(server_python)
    machine = platform.machine() or "x86_64"
    pins = _pins(packages_for(target, extra))
    key = hashlib.sha256(json.dumps([pins, py, machine, MANYLINUX, "pyc:checked-hash"]).encode()).hexdigest()[:16]
    cached = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "embtrt" / "bundles" / f"{python_tag(py)}-{key}"
    if not (cached / BUNDLE_META).is_file():
        log(f"bundling {', '.join(f'{n} {v}' for n, v in pins.items())} for Python {py} ({machine}) with pip")
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".bundle-", dir=cached.parent))
        try:
            _install(pins, py, machine, tmp)
            shutil.rmtree(tmp / "bin", ignore_errors=True)  # console scripts: nothing runs them in the stub
            _compile(tmp, py)
            meta = {"python": py, "python_tag": python_tag(py), "platform": f"manylinux_{machine}", "packages": pins,
                    "size_bytes": sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file()), "cache_key": key}
            (tmp / BUNDLE_META).write_text(json.dumps(meta, indent=2) + "\n")
            try:
                tmp.rename(cached)
            except OSError:  # another build filled the cache meanwhile
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    else:
        log(f"bundle for Python {py} from the cache ({cached})")
    for f in cached.rglob("*"):
        if f.is_file():
            link_or_copy(f, dest / f.relative_to(cached))
    meta = json.loads((dest / BUNDLE_META).read_text())
    log(f"bundled {', '.join(f'{n} {v}' for n, v in meta['packages'].items())} for Python {py}: "
        f"{meta['size_bytes'] / 2**20:.0f} MiB in {dest}")
    return meta
