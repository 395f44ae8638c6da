"""Security properties that need no server."""

import ast
import inspect
from pathlib import Path

import pytest

from embtrt.serve import server as serve
from embtrt.errors import SpecError
from embtrt.export.spec import BuildSpec
from embtrt.export.spec_options import spec_from_options

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


def test_a_folder_is_refused_only_where_it_needs_its_own_code(tmp_path):
    """As transformers decides: an auto_map next to a model type (or tokenizer class) the library has
    loads the library's class, so it builds as before; an unknown one needs the folder's code, in
    the folder or in a module subfolder, and is refused without --trust-remote-code, naming it."""
    import json
    import shutil

    from embtrt.errors import ModelError
    from embtrt.reference.modelinfo import default_model_path, remote_code, require_trusted

    def edit(path: Path, **changes) -> None:
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))

    m = tmp_path / "m"
    shutil.copytree(default_model_path(), m)
    edit(m / "config.json", auto_map={"AutoModel": "modeling_x.XModel"})               # model_type bert
    edit(m / "tokenizer_config.json", auto_map={"AutoTokenizer": ["tok_x.XTokenizer", None]})  # BertTokenizer
    assert remote_code(m) == ""
    require_trusted(m, False)
    sub = m / "0_MLMTransformer"
    sub.mkdir()
    (sub / "config.json").write_text(json.dumps({"model_type": "x-bert", "auto_map": {"AutoModel": "m.X"}}))
    assert remote_code(m) == "0_MLMTransformer/config.json auto_map: AutoModel -> m.X"
    edit(m / "config.json", model_type="x-bert")
    with pytest.raises(ModelError, match=r"runs its own code \(config.json auto_map: AutoModel -> modeling_x.XModel; 0_MLM"):
        require_trusted(m, False)
    require_trusted(m, True)


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
