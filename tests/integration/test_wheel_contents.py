"""The wheel carries every module of the package even where a .gitignore treats `build/` as output
(GitHub's Python template has an unanchored `build/` line; hatchling honours .gitignore). The stage
that was named build/ is export/ for that reason (#28)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _tracked() -> list[str]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line]


def test_a_wheel_built_under_an_unanchored_build_ignore_has_every_module_and_runs(tmp_path):
    src = tmp_path / "checkout"
    for rel in _tracked():
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    with open(src / ".gitignore", "a") as f:
        f.write("\n# GitHub's Python .gitignore template\nbuild/\n")
    subprocess.run(["git", "init", "-q", str(src)], check=True)  # hatchling reads .gitignore in a git tree
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("embtrt-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = [f"embtrt/{p.relative_to(ROOT / 'builder' / 'embtrt')}" for p in (ROOT / "builder" / "embtrt").rglob("*.py")]
    modules += [f"embtrt_backend/{p.relative_to(ROOT / 'python_backend' / 'embtrt_backend')}"
                for p in (ROOT / "python_backend" / "embtrt_backend").rglob("*.py")]
    missing = sorted(m for m in modules if m not in names)
    assert not missing, missing
    assert any(n.startswith("embtrt/python_backend/router/") for n in names)  # the models a build copies
    assert any(n.startswith("embtrt/model_repository_templates/") for n in names)
    # `embtrt build --help` from the wheel's own files (first on the path, ahead of the editable checkout)
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(unpacked)
    env = {**os.environ, "PYTHONPATH": str(unpacked)}
    r = subprocess.run([sys.executable, "-c", "import embtrt, sys; print(embtrt.__file__, file=sys.stderr); "
                        "from embtrt.cli import main; sys.argv = ['embtrt', 'build', '--help']; main()"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert str(unpacked) in r.stderr and "--buckets" in r.stdout
