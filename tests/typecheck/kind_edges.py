"""Kinds are reached through the registry only (#69): no kind package imports another kind package,
and no shared module imports a named kind: neither a kind's package nor its constant (EMBEDDER, ...).

    python tests/typecheck/kind_edges.py

The check fails on every such edge (OWED, the list #69 emptied, kept for a reviewed exception: it only
shrinks). The registries are exempt: embtrt_backend.kinds (the kinds by name, their detection rules) and
embtrt.kinds (its package docstring). `make lint` and tests/unit/test_layers.py run it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from import_layers import imports_of, module_name

CONSTANTS = frozenset({"CLASSIFIER", "DEFAULT", "EMBEDDER", "MULTIMODAL", "MULTIVECTOR", "PAGES", "RERANKER", "SPARSE", "VLM"})
REGISTRIES = frozenset({"embtrt_backend.kinds", "embtrt.kinds"})

OWED: frozenset[str] = frozenset()   # #69 moved the last of them: none is owed


def _kind_package(module: str) -> str | None:
    """The kind a module is in ("reranker" for embtrt.kinds.reranker.* and embtrt_backend.kinds.reranker.*),
    or None (shared, the registry, kinds.base)."""
    bits = module.split(".")
    if len(bits) > 2 and bits[1] == "kinds" and bits[2] != "base":
        return bits[2]
    return None


def _backend_imports(path: Path) -> list[str]:
    """The embtrt_backend modules a builder module imports (absolute imports: the builder's only way)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("embtrt_backend.")]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("embtrt_backend."):
            out.append(node.module or "")
    return out


def _registry_aliases(tree: ast.Module) -> set[str]:
    """The names a module reaches the registry module by: `import embtrt_backend.kinds [as K]`,
    `from embtrt_backend import kinds [as K]`."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.asname or a.name for a in node.names if a.name == "embtrt_backend.kinds"}
        elif isinstance(node, ast.ImportFrom) and node.module == "embtrt_backend" and not node.level:
            out |= {a.asname or a.name for a in node.names if a.name == "kinds"}
    return out


def edges(pkg: Path) -> set[str]:
    """Every kind edge of one package: "module -> kind module" and "module -> CONSTANT"."""
    found: set[str] = set()
    for path in sorted(pkg.rglob("*.py")):
        me = module_name(pkg, path)
        if me in REGISTRIES:
            continue
        mine = _kind_package(me)
        targets = [t for _, t in imports_of(pkg, path)] + (_backend_imports(path) if pkg.name != "embtrt_backend" else [])
        for target in targets:
            theirs = _kind_package(target)
            if theirs and theirs != mine:
                found.add(f"{me} -> {target}")
        if mine:
            continue
        tree = ast.parse(path.read_text(), str(path))
        aliases = _registry_aliases(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("kinds") and \
                    (node.module == "embtrt_backend.kinds" or node.level):
                found |= {f"{me} -> {a.name}" for a in node.names if a.name in CONSTANTS}
            elif isinstance(node, ast.Attribute) and node.attr in CONSTANTS and ast.unparse(node.value) in aliases:
                found.add(f"{me} -> {node.attr}")   # the registry module under a name: kinds.SPARSE
    return found


def check(packages: list[Path], owed: frozenset[str] = OWED) -> list[str]:
    found = set().union(*(edges(p) for p in packages))
    return ([f"{e}: a kind reached around the registry (a new edge; #69's rules, tests/typecheck/kind_edges.py)"
             for e in sorted(found - owed)]
            + [f"{e}: listed in OWED but gone: take it off the list" for e in sorted(owed - found)])


def packages(root: Path) -> list[Path]:
    return [root / "builder" / "embtrt", root / "python_backend" / "embtrt_backend"]


def main() -> int:
    root = Path(__file__).resolve().parents[2]
    problems = check(packages(root))
    for p in problems:
        print(p)
    print(f"{len(problems)} kind-edge problems; {len(OWED)} edges still owed (#69)" if problems
          else "ok: no kind package imports another, no shared module names a kind")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
