"""Imports go one way: cli -> up -> stages -> reference -> repository -> common -> errors.

    python tests/typecheck/import_layers.py [PACKAGE_DIR]

Every `import` / `from ... import` of embtrt code in every module (at module level and inside
functions alike) is resolved to the module it names. It fails when a module imports a higher
layer, when a stage imports a sibling stage (export, scale and measure are peers; serve sits
below them: tune and verify start servers and call them), or when the module graph has a cycle.
`make lint` and tests/unit/test_layers.py run it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

# rank of each top-level part of the package; a module may import only strictly lower ranks
# (or its own part)
LAYERS: dict[str, int] = {
    "__init__": 0, "errors": 0,
    "common": 1,
    "repository": 2,
    "reference": 3,
    "serve": 4,
    "export": 5, "scale": 5, "measure": 5,
    "up": 6,   # `embtrt up` joins export, serve and scale
    "cli": 7,
}


def module_name(pkg: Path, path: Path) -> str:
    rel = path.relative_to(pkg.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def part_of(module: str) -> str:
    """The layer of a module: its top-level part; a kind package's module (embtrt.kinds.KIND.LAYER or
    LAYER_WHAT) is in its layer, the packages themselves are as low as the package's __init__."""
    bits = module.split(".")
    if len(bits) > 1 and bits[1] == "kinds":
        return bits[3].split("_")[0] if len(bits) > 3 else "__init__"
    return bits[1] if len(bits) > 1 else "__init__"


def imports_of(pkg: Path, path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every import of the package's own code in one file."""
    me = module_name(pkg, path)
    is_pkg = path.name == "__init__.py"
    base = me.split(".") if is_pkg else me.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == pkg.name]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                target = ".".join(anchor + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != pkg.name:
                continue
            # `from . import x` / `from .pkg import mod`: count the submodule when it is one
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((node.lineno, sub if _exists(pkg, sub) else target))
    return out


def _exists(pkg: Path, module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    return (pkg / rel).with_suffix(".py").is_file() or (pkg / rel / "__init__.py").is_file()


def check(pkg: Path) -> list[str]:
    problems: list[str] = []
    graph: dict[str, set[str]] = {}
    for path in sorted(pkg.rglob("*.py")):
        me = module_name(pkg, path)
        mine = part_of(me)
        if mine not in LAYERS:
            problems.append(f"{path}: part {mine!r} has no layer in LAYERS (add it to tests/typecheck/import_layers.py)")
            continue
        graph.setdefault(me, set())
        for line, target in imports_of(pkg, path):
            theirs = part_of(target)
            if target.split(".")[0] == BACKEND:
                continue  # the lowest layer: python_backend/embtrt_backend (check_backend)
            if theirs not in LAYERS:
                problems.append(f"{path}:{line}: imports {target}, which has no layer")
                continue
            graph[me].add(target)
            if theirs == mine:
                continue
            if LAYERS[theirs] > LAYERS[mine]:
                problems.append(f"{path}:{line}: upward import: {mine} (layer {LAYERS[mine]}) imports {target} "
                                f"(layer {LAYERS[theirs]})")
            elif LAYERS[theirs] == LAYERS[mine]:
                problems.append(f"{path}:{line}: stage {mine} imports its sibling stage {target}; move the shared "
                                "piece down a layer")
    problems += [f"import cycle: {' -> '.join(c)}" for c in _cycles(graph)]
    return problems


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp) + [sorted(comp)[0]])

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


BACKEND = "embtrt_backend"


def check_backend(python_backend: Path, builder_pkg_name: str = "embtrt") -> list[str]:
    """embtrt_backend is the lowest layer: it imports nothing of the builder (embtrt) and nothing of the
    Python-backend models; the models (python_backend/*/model.py) import only embtrt_backend of the
    project's code; embtrt_backend has no import cycle. The builder may import it from any layer."""
    problems: list[str] = []
    lib = python_backend / BACKEND
    models = {p.parent.name for p in python_backend.glob("*/model.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(python_backend.rglob("*.py")):
        in_lib = lib in path.parents
        me = module_name(lib, path) if in_lib else f"{path.parent.name}.model"
        graph.setdefault(me, set())
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level and in_lib:
                    base = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
                    anchor = base[: len(base) - (node.level - 1)]
                    target = ".".join(anchor + ([node.module] if node.module else []))
                    names = [f"{target}.{a.name}" if _exists(lib, f"{target}.{a.name}") else target for a in node.names]
                else:
                    names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                if top == builder_pkg_name:
                    problems.append(f"{path}:{node.lineno}: {me} imports {name}: embtrt_backend and the Python-backend "
                                    "models sit below the builder and never import it")
                elif top in models:
                    problems.append(f"{path}:{node.lineno}: {me} imports the model {name}")
                elif top == BACKEND and in_lib:
                    graph[me].add(name if _exists(lib, name) else name.rsplit(".", 1)[0])
    problems += [f"import cycle: {' -> '.join(c)}" for c in _cycles(graph)]
    return problems


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[2]
    pkg = Path(argv[1]) if len(argv) > 1 else root / "builder" / "embtrt"
    problems = check(pkg)
    if len(argv) <= 1:
        problems += check_backend(root / "python_backend")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} import-layer problems")
        return 1
    print(f"ok: imports in {pkg} go one way ({' > '.join(sorted(set(LAYERS), key=lambda k: -LAYERS[k]))} > "
          f"{BACKEND}), no cycle")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
