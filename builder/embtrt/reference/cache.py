"""Reference results kept on disk, keyed by everything they are computed from.

A PyTorch reference over the gate's corpus is the slowest part of a build's gate and of
`embtrt verify` (MiniLM: 8-9 s of 2 CPU cores for 370 texts; minutes for a large model), and
the same model is gated again for every target it is built for (python-ort, OpenVINO, TensorRT)
and verified after each deployment. The result depends only on the model folder's bytes, the
texts, the reference's options and the versions of the libraries that compute it, so those are
the key: a changed weight, tokenizer file, text, option or library version is a different entry,
never a stale one.

Where: $EMBTRT_REFERENCE_CACHE (a folder; `off` turns the cache off), else
$XDG_CACHE_HOME/embtrt/references (~/.cache/embtrt/references). Each entry is one .npy file
(MiniLM over the corpus: 0.6 MB); deleting the folder is always safe. What a folder is
(reference/modelinfo.py's ModelInfo, which needs transformers and the model class: 4-5 s of
imports in a fresh process) is kept beside them as JSON, so `embtrt verify` with a cached
reference imports neither transformers nor PyTorch.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import time
import zipfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import numpy as np

from ..common.files import sha256_file

ENV = "EMBTRT_REFERENCE_CACHE"
SCHEMA = 1
_LIBRARIES = ("torch", "transformers", "sentence-transformers", "tokenizers")
# the code that computes an entry, from this folder (the sparse reference is in the sparse kind's package)
_CODE = ("torch_ref.py", "../kinds/sparse/reference.py", "modelinfo.py", "cache.py")
_digests: dict[tuple, str] = {}


def cache_dir() -> Path | None:
    """The cache folder, or None when $EMBTRT_REFERENCE_CACHE turns it off."""
    value = os.environ.get(ENV)
    if value is not None:
        return None if value.strip().lower() in ("", "0", "off", "no", "false") else Path(value)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "embtrt" / "references"


def folder_digest(path: Path) -> str:
    """sha256 over every file of a model folder (relative name and bytes), in sorted order; remembered
    per process for as long as no file's inode, size, modification or change time moves
    (a folder with a file changed in the last 2 s is hashed again each time)."""
    path = Path(path).resolve()
    files = sorted(f for f in path.rglob("*") if f.is_file() and ".git" not in f.relative_to(path).parts)
    stats = [(str(f), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for f in files for st in (f.stat(),)]
    stamp = (str(path), *stats)
    if stamp in _digests:
        return _digests[stamp]
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(path)).encode() + b"\0")
        h.update(bytes.fromhex(sha256_file(f)))
    # as git's racily-clean rule: a file changed in the last seconds may change again within the
    # filesystem's timestamp granularity, unseen by its stat, so such a folder is hashed every time
    settled = time.time_ns() - 2_000_000_000
    if all(max(mtime, ctime) < settled for _, _, _, mtime, ctime in stats):
        _digests[stamp] = h.hexdigest()
    return h.hexdigest()


def _versions() -> dict[str, str]:
    out = {}
    for name in _LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """sha256 of embtrt's own reference code (pooling, the encode wrappers, what a folder is, this
    module): an embtrt that computes a reference differently never reads an older one's entries."""
    h = hashlib.sha256()
    for name in _CODE:
        h.update(name.encode() + b"\0" + (Path(__file__).parent / name).read_bytes())
    return h.hexdigest()


def entry_key(what: str, model_dir: Path, texts: list[str], options: dict) -> str:
    """The entry's name: sha256 of what computes it, the folder's digest, the texts, the options, the
    libraries' versions and embtrt's reference code."""
    doc = {"schema": SCHEMA, "what": what, "model": folder_digest(model_dir),
           "texts": hashlib.sha256(json.dumps(texts, ensure_ascii=False, default=repr).encode()).hexdigest(),
           "options": options, "versions": _versions(), "code": _code_digest()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def _save(fh, out: np.ndarray, sparse: bool) -> None:
    if not sparse:
        np.save(fh, out, allow_pickle=False)
        return
    rows, cols = np.nonzero(out)   # row-major: each row's columns in order
    np.savez(fh, shape=np.asarray(out.shape, dtype=np.int64), rows=rows.astype(np.int64),
             cols=cols.astype(np.int64), values=out[rows, cols], dtype=np.asarray(str(out.dtype)))


def _load(entry: Path, sparse: bool) -> np.ndarray:
    if not sparse:
        return np.load(entry, allow_pickle=False)
    with np.load(entry, allow_pickle=False) as z:
        out = np.zeros(tuple(int(n) for n in z["shape"]), dtype=np.dtype(str(z["dtype"])))
        out[z["rows"], z["cols"]] = z["values"]
    return out


def cached(what: str, model_dir: Path, texts: list[str], options: dict,
           compute: Callable[[], np.ndarray], sparse: bool = False) -> np.ndarray:
    """compute()'s array for this (what, folder, texts, options), from the cache when it holds it;
    a computed result is written atomically, an unreadable entry is computed again. `sparse`: a
    mostly-zero [texts, vocabulary] array, stored as its non-zero entries (a SPLADE reference over
    the corpus: about 1 MB instead of 45)."""
    folder = cache_dir()
    if folder is None:
        return compute()
    entry = folder / f"{entry_key(what, model_dir, texts, options)}.{'npz' if sparse else 'npy'}"
    try:
        got = _load(entry, sparse)
        if got.shape[0] == len(texts):
            return got
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        pass
    out = compute()
    _write(entry, lambda fh: _save(fh, out, sparse))
    return out


def _write(entry: Path, write: Callable) -> None:
    """write(file) into a temporary file beside `entry`, then renamed onto it: readers see a whole
    entry or none. A read-only or full cache costs the next run the computation, nothing else."""
    tmp = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".ref-", suffix=entry.suffix, dir=entry.parent)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, entry)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def cached_json(what: str, model_dir: Path, options: dict, compute: Callable[[], dict]) -> dict:
    """compute()'s JSON document for this (what, folder, options), from the cache when it holds it."""
    folder = cache_dir()
    if folder is None:
        return compute()
    entry = folder / f"{entry_key(what, model_dir, [], options)}.json"
    try:
        got = json.loads(entry.read_text(encoding="utf-8"))
        if isinstance(got, dict):
            return got
    except (OSError, ValueError):
        pass
    out = compute()
    _write(entry, lambda fh: fh.write(json.dumps(out).encode("utf-8")))
    return out
