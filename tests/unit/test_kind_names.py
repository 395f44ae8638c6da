"""Kinds as plug-ins (#50): a kind's name ("embedder", "reranker", "sparse") is spelled only by its
module in embtrt_backend/kinds/; every other module of the product names a kind through the
registry (EMBEDDER.name, kind_of(...), the Kind's own fields), so that adding a kind does not mean
finding its siblings' names in shared code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from embtrt_backend.kinds import BY_NAME, DEFAULT, EMBEDDER, KINDS, NAMES, RERANKER, kind_of

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = (ROOT / "builder" / "embtrt", ROOT / "python_backend")
REGISTRY = ROOT / "python_backend" / "embtrt_backend" / "kinds"


def kind_literals(roots, base: Path = ROOT) -> list[str]:
    """`file:line: 'name'` for every string constant equal to a kind's name outside the registry."""
    found = []
    for root in roots:
        for f in sorted(root.rglob("*.py")):
            if REGISTRY in f.parents:
                continue
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), str(f))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES:
                    found.append(f"{f.relative_to(base)}:{node.lineno}: {node.value!r}")
    return found


def test_only_the_kinds_registry_spells_a_kinds_name():
    assert kind_literals(PRODUCT) == []


def test_a_planted_kind_name_in_shared_code_is_found(tmp_path):
    (tmp_path / "probe.py").write_text('def f(kind):\n    """sparse and embedder in prose are words"""\n'
                                       '    return kind == "reranker"\n')
    assert kind_literals([tmp_path], tmp_path) == ["probe.py:3: 'reranker'"]


def test_the_registry_names_each_kind_once_and_an_unknown_one_is_refused():
    assert NAMES == tuple(k.name for k in KINDS) and len(set(NAMES)) == len(KINDS) == len(BY_NAME)
    assert kind_of(None) is kind_of("") is DEFAULT is EMBEDDER and kind_of(RERANKER.name) is RERANKER
    assert RERANKER.pairs and not EMBEDDER.pairs and EMBEDDER.noun == "embedder"
    with pytest.raises(ValueError, match="unknown kind of model 'colbert': one of embedder, reranker, sparse"):
        kind_of("colbert")


def test_every_kind_names_its_build_and_gateway_model_and_they_resolve():
    """The layers that differ by kind find the kind's implementation through its Kind
    (embtrt.common.plugins), never by a branch on its name: each kind names one for each."""
    import inspect
    from dataclasses import replace

    import pytest
    from embtrt_backend.kinds import KINDS

    from embtrt.common.plugins import implementation

    for kind in KINDS:
        build = implementation(kind, "build")
        assert callable(build) and list(inspect.signature(build).parameters) == ["spec", "tmp", "texts", "log"], kind.name
        model = implementation(kind, "gateway_model")
        assert inspect.isclass(model) and model.kind is kind, kind.name   # the class serves this kind
        if kind.verify:   # the embedder's verify is the CLI's own (its cosine gate and options)
            params = list(inspect.signature(implementation(kind, "verify")).parameters)
            assert params[:4] == ["url", "model", "reference", "texts"] and "against" in params, kind.name
    assert sum(bool(k.verify) for k in KINDS) == len(KINDS) - 1
    with pytest.raises(LookupError, match="has no build"):
        implementation(replace(KINDS[0], build=""), "build")
