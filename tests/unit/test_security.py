"""Security properties that need no server."""

import ast
import inspect
from pathlib import Path

import pytest

from embtrt.serve import server as serve
from embtrt.errors import SpecError
from embtrt.export.spec import BuildSpec, spec_from_options

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["../outside", "a/b", "/abs", "..", "x" * 80, "name with space", ""])
def test_model_names_cannot_escape_the_output_folder(name):
    with pytest.raises(SpecError, match="name"):
        BuildSpec(model_dir=Path("/m"), out=Path("/o"), name=name)


def test_servers_bind_to_loopback_by_default():
    assert serve.ServerSpec(repository=Path("/r")).host == "127.0.0.1"
    assert inspect.signature(serve.free_port).parameters["host"].default == "127.0.0.1"


def test_trust_remote_code_is_off_unless_asked():
    assert BuildSpec(model_dir=Path("/m"), out=Path("/o"), name="m").trust_remote_code is False
    assert spec_from_options(None, Path("/tmp/x"), target="python-ort").trust_remote_code is False


def test_python_backend_never_evaluates_request_content():
    banned = {"eval", "exec", "compile", "__import__"}
    banned_modules = {"pickle", "marshal", "shelve", "subprocess"}
    for path in (ROOT / "python_backend").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in banned, f"{path}: calls {node.func.id}"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = {a.name.split(".")[0] for a in node.names} | {getattr(node, "module", None) or ""}
                assert not names & banned_modules, f"{path}: imports {names & banned_modules}"
