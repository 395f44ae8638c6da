"""`make gpu-kit`: pack what the GPU host lacks into .gpukit/ (git-ignored), to travel beside the
working tree to a lent GPU machine (at most 64 MiB in all, the working tree included).

What it carries (kit.json lists every file with its size and sha256):
- tritonserver.tar.xz: the nvidia-pytriton wheel's tritonserver (bin, Python backend, caches) and
  its nvidia_pytriton.libs, with the Python-backend stubs for 3.11 (this machine's dry run) and
  3.12 (the GPU host) only;
- wheels/: numpy 1.26 for CPython 3.12 (Triton 2.51's Python backend fails on BYTES inputs with
  numpy 2 in the stub's Python; the GPU host has numpy 2.5), and the pure-Python pieces the build
  needs that the GPU host may lack, at the versions installed here: tritonclient (its generated
  model_config_pb2; no gRPC is needed, embtrt.repository.proto), protobuf (that module's runtime),
  jinja2 and markupsafe;
- tokenizer/: the bundled all-MiniLM-L6-v2's tokenizer and sentence-transformers files, no
  weights: the kit makes every model's weights on the GPU host from a config with a fixed seed.

    python benchmarks/gpukit/pack.py [--out .gpukit] [--xz-level 6]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUBS = ("3.11", "3.12")
WHEELS_312 = ("numpy==1.26.4",)
PURE = ("tritonclient", "protobuf", "jinja2", "markupsafe")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                   "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
                   "1_Pooling/config.json")
LIMIT = 64 << 20


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pack_tritonserver(out: Path, level: int) -> None:
    import pytriton

    root = Path(pytriton.__file__).parent / "tritonserver"
    libs = root.parent.parent / "nvidia_pytriton.libs"

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        if len(parts) > 2 and parts[1] == "python_backend_stubs" and parts[2] not in STUBS:
            return None
        return info

    with tarfile.open(out, "w:xz", preset=level) as tar:
        tar.add(root, arcname="tritonserver", filter=keep)
        tar.add(libs, arcname="nvidia_pytriton.libs")


def download_wheels(dest: Path) -> None:
    pins = [*WHEELS_312, *(f"{name}=={md.version(name)}" for name in PURE)]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64", "--platform",
           "manylinux_2_28_x86_64", "-d", str(dest), *pins]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"gpu-kit: pip download failed:\n{r.stderr[-2000:]}")


def copy_tokenizer(dest: Path) -> None:
    from embtrt.reference.modelinfo import default_model_path

    src = default_model_path()
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, dest / name)


def tree_bytes() -> int:
    """The working tree as the device tool carries it: tracked files and untracked ones git does not ignore."""
    names = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           check=True, capture_output=True).stdout.split(b"\0")
    return sum((ROOT / n.decode()).stat().st_size for n in names if n and (ROOT / n.decode()).is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".gpukit", help="the kit folder. Default .gpukit/.")
    ap.add_argument("--xz-level", type=int, default=6, help="xz preset of tritonserver.tar.xz (0 fast .. 9 small). Default 6.")
    ap.add_argument("--no-downloads", action="store_true",
                    help="carry no wheels (the CPU dry run uses this machine's packages; nothing is fetched)")
    args = ap.parse_args()
    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    (out / "wheels").mkdir(parents=True)
    (out / "tokenizer").mkdir()
    print(f"packing tritonserver (xz -{args.xz_level}) ...", flush=True)
    pack_tritonserver(out / "tritonserver.tar.xz", args.xz_level)
    if not args.no_downloads:
        download_wheels(out / "wheels")
    copy_tokenizer(out / "tokenizer")
    files = {str(p.relative_to(out)): {"bytes": p.stat().st_size, "sha256": _sha(p)}
             for p in sorted(out.rglob("*")) if p.is_file()}
    kit = sum(f["bytes"] for f in files.values())
    tree = tree_bytes()
    doc = {"files": files, "kit_bytes": kit, "tree_bytes": tree, "total_bytes": kit + tree, "limit_bytes": LIMIT,
           "xz_level": args.xz_level, "wheels": not args.no_downloads,
           "stubs": list(STUBS), "python_built_on": f"{sys.version_info.major}.{sys.version_info.minor}"}
    (out / "kit.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"kit {kit / 2**20:.1f} MiB + working tree {tree / 2**20:.1f} MiB = {(kit + tree) / 2**20:.1f} MiB "
          f"of {LIMIT / 2**20:.0f} MiB -> {out}")
    if kit + tree > LIMIT and args.xz_level >= 6:
        sys.exit("gpu-kit: over the device's 64 MiB: it would not travel")


if __name__ == "__main__":
    main()
