"""The code's layout holds: the library never imports the CLI, no import circles, small modules that say what they hold."""

from __future__ import annotations

import ast
import subprocess
import sys

from conftest import ROOT

PACKAGES = ("appmaster", "container", "proto", "scripts")
#: The most lines a module of the product may have; beyond it, split it by responsibility.
MAX_LINES = 600


def _modules() -> dict[str, str]:
    """module name -> path of every project module (generated protobuf code aside)."""
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = str(path)
    return out


def _imports(name: str, path: str, known: set[str]) -> set[str]:
    """Project modules ``name`` imports at run time anywhere in its file (lazy imports count too)."""
    tree = ast.parse(open(path).read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(block.test) for n in ast.walk(block)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue  # annotations only: never imported at run time
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    graph = {}
    for name, path in mods.items():
        deps = _imports(name, path, known)
        # importing a submodule runs its package's __init__, but a package importing its own
        # submodules is the package's business, not a circle through them
        graph[name] = {d for d in deps if not name.startswith(d + ".")}
    return graph


def test_no_import_circles():
    graph = _graph()
    state: dict[str, int] = {}
    circles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                circles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert circles == [], "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_library_never_imports_the_cli():
    graph = _graph()
    offenders = sorted(f"{m} imports {d}" for m, deps in graph.items() if not m.startswith("scripts")
                       for d in deps if d.startswith("scripts"))
    assert offenders == []
    # and for real: importing the YARN package loads nothing from scripts
    code = "import sys, appmaster.yarn; print(sorted(m for m in sys.modules if m.split('.')[0] == 'scripts'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _product_modules() -> dict[str, str]:
    return {name: path for name, path in _modules().items() if not name.endswith(("_pb2", "_pb2_grpc"))}


def test_modules_stay_small():
    big = {name: n for name, path in _product_modules().items() if (n := sum(1 for _ in open(path))) > MAX_LINES}
    assert big == {}, f"modules over {MAX_LINES} lines: {big}"


def test_every_module_opens_with_its_purpose():
    missing = sorted(name for name, path in _product_modules().items()
                     if not ast.get_docstring(ast.parse(open(path).read(), path)))
    assert missing == []
