"""The package's imports go one way (cli -> stages -> reference -> repository -> common -> errors)."""

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "typecheck"))

from import_layers import check  # noqa: E402


def test_the_package_imports_only_downward_and_has_no_cycle():
    assert check(ROOT / "builder" / "embtrt") == []


def _copy(tmp_path: Path) -> Path:
    pkg = tmp_path / "embtrt"
    shutil.copytree(ROOT / "builder" / "embtrt", pkg, ignore=shutil.ignore_patterns("__pycache__", "data"))
    return pkg


def test_a_planted_upward_import_fails_the_check(tmp_path):
    pkg = _copy(tmp_path)
    f = pkg / "repository" / "check.py"
    f.write_text(f.read_text() + "\n\ndef _x():\n    from ..export.spec import BuildSpec  # noqa\n")
    problems = check(pkg)
    assert len(problems) == 1 and "upward import: repository" in problems[0] and "embtrt.export.spec" in problems[0]


def test_a_stage_importing_a_sibling_stage_fails_the_check(tmp_path):
    pkg = _copy(tmp_path)
    f = pkg / "scale" / "k8s.py"
    f.write_text(f.read_text() + "\nfrom ..measure import bench  # noqa\n")
    problems = check(pkg)
    assert len(problems) == 1 and "sibling stage" in problems[0]


def test_a_cycle_inside_one_stage_fails_the_check(tmp_path):
    pkg = _copy(tmp_path)
    f = pkg / "export" / "spec.py"
    f.write_text(f.read_text() + "\n\ndef _x():\n    from .render import plan_repository  # noqa\n")
    problems = check(pkg)
    assert any(p.startswith("import cycle:") and "embtrt.export.render" in p and "embtrt.export.spec" in p for p in problems)
