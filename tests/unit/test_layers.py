"""The package's imports go one way (cli -> stages -> reference -> repository -> common -> errors)."""

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "typecheck"))

from import_layers import check, check_backend  # noqa: E402


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
    f = pkg / "scale" / "gateway" / "config.py"
    f.write_text(f.read_text() + "\nfrom ...measure import tune  # noqa\n")
    problems = check(pkg)
    assert len(problems) == 1 and "sibling stage" in problems[0]


def test_a_cycle_inside_one_stage_fails_the_check(tmp_path):
    pkg = _copy(tmp_path)
    f = pkg / "export" / "spec.py"
    f.write_text(f.read_text() + "\n\ndef _x():\n    from .render import plan_repository  # noqa\n")
    problems = check(pkg)
    assert any(p.startswith("import cycle:") and "embtrt.export.render" in p and "embtrt.export.spec" in p for p in problems)


def test_embtrt_backend_is_the_lowest_layer():
    assert check_backend(ROOT / "python_backend") == []


def _copy_backend(tmp_path: Path) -> Path:
    dest = tmp_path / "python_backend"
    shutil.copytree(ROOT / "python_backend", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_embtrt_backend_importing_the_builder_fails_the_check(tmp_path):
    pb = _copy_backend(tmp_path)
    f = pb / "embtrt_backend" / "pooling.py"
    f.write_text(f.read_text() + "\n\ndef _x():\n    from embtrt.errors import SpecError  # noqa\n")
    problems = check_backend(pb)
    assert len(problems) == 1 and "embtrt_backend.pooling imports embtrt.errors" in problems[0]


def test_a_model_importing_the_builder_or_a_backend_cycle_fails_the_check(tmp_path):
    pb = _copy_backend(tmp_path)
    f = pb / "router" / "model.py"
    f.write_text(f.read_text() + "\n\ndef _x():\n    import embtrt.serve.client  # noqa\n")
    g = pb / "embtrt_backend" / "routing.py"
    g.write_text(g.read_text() + "\n\ndef _y():\n    from .core import RequestCore  # noqa\n")
    problems = check_backend(pb)
    assert any("router.model imports embtrt.serve.client" in p for p in problems)
    assert any(p.startswith("import cycle:") and "embtrt_backend.routing" in p and "embtrt_backend.core" in p
               for p in problems)


def test_kinds_are_reached_through_the_registry_only_and_nothing_is_owed():
    import kind_edges

    assert kind_edges.check(kind_edges.packages(ROOT)) == []
    assert kind_edges.OWED == frozenset()   # #69: no kind package imports another, no shared module names a kind


def test_a_planted_kind_to_kind_import_and_a_shared_kind_constant_fail_the_check(tmp_path):
    import kind_edges

    pkg = _copy(tmp_path)
    f = pkg / "kinds" / "sparse" / "serve.py"
    f.write_text(f.read_text() + "\n\ndef _x():\n    from ..multivector.reference import m3_heads  # noqa\n")
    f = pkg / "export" / "result.py"
    f.write_text(f.read_text() + "\nfrom embtrt_backend.kinds import MULTIMODAL  # noqa\n")
    f = pkg / "serve" / "ports.py"   # the registry module under a name of its own, then its constant
    f.write_text(f.read_text() + "\nimport embtrt_backend.kinds as K  # noqa\n\n\ndef _y(kind):\n    return kind is K.SPARSE\n")
    problems = kind_edges.check([pkg, ROOT / "python_backend" / "embtrt_backend"])
    assert problems == [
        "embtrt.export.result -> MULTIMODAL: a kind reached around the registry (a new edge; #69's rules, "
        "tests/typecheck/kind_edges.py)",
        "embtrt.kinds.sparse.serve -> embtrt.kinds.multivector.reference: a kind reached around the registry (a new "
        "edge; #69's rules, tests/typecheck/kind_edges.py)",
        "embtrt.serve.ports -> SPARSE: a kind reached around the registry (a new edge; #69's rules, "
        "tests/typecheck/kind_edges.py)"]
    stale = kind_edges.check(kind_edges.packages(ROOT), kind_edges.OWED | {"embtrt.serve.probe -> SPARSE"})
    assert stale == ["embtrt.serve.probe -> SPARSE: listed in OWED but gone: take it off the list"]
