"""A/B of the build: the working tree against BASE write the same repositories from the same folders.

    python benchmarks/build_ab.py BASE [--out DIR] [--keep]
    (or: make build-ab BASE=...)

A change meant to move or reshape build code (not to change what it writes) is checked by this:
`git archive BASE` is unpacked into a scratch folder (as benchmarks/ab.py does), and each side's own code
(its `builder/` and `python_backend/` first on PYTHONPATH, this venv) builds the same folders with the same
options: the bundled all-MiniLM-L6-v2 (default, and `--pooler python`), tiny seeded models of
tests/tiny_models.py (a CLS BERT, an XLM-R over BLS encoders, a Qwen3 on python-torch, a cross-encoder local
and over BLS, a SPLADE). Every file of each pair of repositories must be byte-identical, `embtrt.json`
compared without its `built_at` and with the output folder's path taken out; the build logs' step and check
lines ("[...]") are compared too, with the build folder's path, times and temporary names taken out (a
difference there is reported, not failed: logs may change on purpose). Exit 1 where a repository differs.

TensorRT, OpenVINO and reduced-precision builds are not in the set (the default test tier covers them); the
set is the targets and routings this machine builds in a few minutes (about 3.5 on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab import ROOT, cpu_name, embtrt_cmd, tree_env, unpack  # noqa: E402

# (name, model maker of tests/tiny_models.py or None for the bundled MiniLM, build options)
BUILDS = (("minilm", None, []), ("minilm-python-pooler", None, ["--pooler", "python"]),
          ("bert-cls", "make_bert_cls", []), ("xlmr-bls", "make_xlmr_mean", ["--router-encoder", "bls"]),
          ("qwen3-torch", "make_qwen3_last", ["--target", "python-torch"]),
          ("cross-encoder", "make_bert_cross_encoder", []),
          ("cross-encoder-bls", "make_bert_cross_encoder", ["--router-encoder", "bls"]),
          ("splade", "make_bert_splade", []))
_NOISE = re.compile(r"\d+(\.\d+)? ?(s|ms|MiB)\b|\.embtrt-\w+|\d+(\.\d+)?it/s")


def models(dest: Path) -> dict[str, Path]:
    """The tiny seeded folders the set builds (each made once, by the working tree's tests/tiny_models.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import tiny_models

    out = {}
    for _, maker, _ in BUILDS:
        if maker is not None and maker not in out:
            out[maker] = getattr(tiny_models, maker)(dest / maker)
    return out


def build(tree: Path, folder: Path | None, out: Path, options: list[str], log: Path) -> int:
    cmd = [*embtrt_cmd(tree), "build", "--out", str(out), *options, *([str(folder)] if folder else [])]
    with log.open("w") as f:
        return subprocess.run(cmd, env=tree_env(tree), stdout=f, stderr=subprocess.STDOUT, cwd=tree).returncode


def files(repo: Path) -> dict[str, Path]:
    """Every file of a repository but its bundled packages (`_deps`: the same wheels, installed each time)."""
    return {str(p.relative_to(repo)): p for p in sorted(repo.rglob("*")) if p.is_file() and "_deps" not in p.parts}


def manifest(path: Path, out: Path) -> str:
    doc = json.loads(path.read_text())
    doc.pop("built_at", None)
    doc.get("extra", {}).pop("built_at", None)
    return json.dumps(doc, sort_keys=True).replace(str(out), "OUT")


def steps(log: Path, out: Path) -> list[str]:
    text = log.read_text(errors="replace").replace("\r", "\n").replace(str(out), "OUT")
    return [_NOISE.sub("~", line) for line in text.splitlines() if line.startswith("[")]


def compare(a: Path, b: Path) -> list[str]:
    """What differs between two repositories (the same build by BASE at `a` and the working tree at `b`)."""
    fa, fb = files(a), files(b)
    out = [f"only in {side}: {name}" for side, only in (("BASE", fa.keys() - fb.keys()), ("HEAD", fb.keys() - fa.keys()))
           for name in sorted(only)]
    for name in sorted(fa.keys() & fb.keys()):
        same = (manifest(fa[name], a) == manifest(fb[name], b)) if name == "embtrt.json" else \
            fa[name].read_bytes() == fb[name].read_bytes()
        if not same:
            out.append(f"differs: {name}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("--out", type=Path, help="keep the repositories and logs here (default: a scratch folder, removed)")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="embtrt-build-ab-"))
    work = args.out or scratch
    try:
        base_tree = scratch / "base-tree"
        full = unpack(args.base, base_tree)
        made = models(scratch / "models")
        print(f"build A/B: BASE {full[:12]} against the working tree {ROOT}; {cpu_name()}")
        failed = 0
        for name, maker, options in BUILDS:
            folder = made[maker] if maker else None
            outs = {}
            for side, tree in (("base", base_tree), ("head", ROOT)):
                out = work / side / name
                shutil.rmtree(out, ignore_errors=True)
                out.parent.mkdir(parents=True, exist_ok=True)
                rc = build(tree, folder, out, options, work / side / f"{name}.log")
                if rc != 0:
                    sys.exit(f"build-ab: {name} by {side} failed (exit {rc}); see {work / side / f'{name}.log'}")
                outs[side] = out
            diff = compare(outs["base"], outs["head"])
            logs = [steps(work / s / f"{name}.log", outs[s]) for s in ("base", "head")]
            failed += bool(diff)
            print(f"{name:22s} {len(files(outs['head'])):4d} files  "
                  f"{'identical' if not diff else 'DIFFERENT: ' + '; '.join(diff[:5])}"
                  f"{'' if logs[0] == logs[1] else '  (log step lines differ)'}")
        print(f"{len(BUILDS) - failed} of {len(BUILDS)} builds write identical repositories")
        sys.exit(1 if failed else 0)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
