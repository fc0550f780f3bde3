"""The code's layout holds: one package, a base layer, rooms that import in one direction, no circles.

The modules are found through ``setup.cfg``'s ``package_dir`` (the one place that
says which folder is which part of ``stram``), so these checks follow the mapping
an install uses.
"""

from __future__ import annotations

import ast
import configparser
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT, read_counts, word_truth

#: The most lines a module of the product may have; beyond it, split it by responsibility.
MAX_LINES = 600
#: Modules allowed past MAX_LINES, and why (cohesion, not size, decides).
LARGE = {}


def _config() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg


def _package_dirs() -> dict[str, str]:
    """package -> folder, from setup.cfg's package_dir."""
    lines = _config()["options"]["package_dir"].strip().splitlines()
    return dict((k.strip(), v.strip()) for k, v in (line.split("=") for line in lines))


def _listed_packages() -> list[str]:
    return _config()["options"]["packages"].split()


def _folder(package: str) -> str:
    """The folder a package lives in, by the longest package_dir prefix."""
    dirs = _package_dirs()
    parts = package.split(".")
    for n in range(len(parts), 0, -1):
        head = ".".join(parts[:n])
        if head in dirs:
            return "/".join([dirs[head], *parts[n:]])
    raise AssertionError(f"no package_dir for {package}")


def _modules() -> dict[str, str]:
    """module name -> path of every module of every listed package."""
    out = {}
    for package in _listed_packages():
        for path in sorted((ROOT / _folder(package)).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            out[name] = str(path)
    return out


def _imports(name: str, path: str, known: set[str], *, private: list[str] | None = None) -> set[str]:
    """Project modules ``name`` imports anywhere in its file (lazy and annotation-only imports count)."""
    tree = ast.parse(open(path).read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
            if private is not None and base in known and base != name:
                private += [f"{name} imports {base}.{a.name}" for a in node.names
                            if a.name.startswith("_") and f"{base}.{a.name}" not in known]
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


def test_setup_cfg_lists_every_package_folder():
    """A folder with an ``__init__.py`` under a mapped root is a listed package, and the reverse."""
    listed = set(_listed_packages())
    for package in listed:
        assert (ROOT / _folder(package) / "__init__.py").is_file(), package
    found = set()
    for package, folder in _package_dirs().items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            name = ".".join([package, *rel])
            if _folder(name) == str(init.parent.relative_to(ROOT)):
                found.add(name)
    assert found == listed


def test_no_import_circles():
    """Annotation-only imports count: a circle is a circle to a reader, whatever runs."""
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


def _offenders(room: str, allowed: tuple[str, ...]) -> list[str]:
    """Imports by modules of ``room`` of project modules outside ``allowed`` (prefixes)."""
    def inside(mod: str, prefixes: tuple[str, ...]) -> bool:
        return any(mod == p or mod.startswith(p + ".") for p in prefixes)
    return sorted(f"{m} imports {d}" for m, deps in _graph().items() if inside(m, (room,))
                  for d in deps if not inside(d, allowed))


def test_the_base_layer_imports_nothing_above_it():
    assert _offenders("stram.common", ("stram.common",)) == []
    assert _offenders("stram.wire", ("stram.wire",)) == []


def test_master_and_agent_never_import_each_other():
    assert _offenders("stram.master", ("stram.master", "stram.common", "stram.wire", "stram.operator")) == []
    assert _offenders("stram.agent", ("stram.agent", "stram.common", "stram.wire", "stram.operator")) == []


def test_the_cli_side_is_imported_by_nobody_else():
    offenders = sorted(f"{m} imports {d}" for m, deps in _graph().items()
                       # the NEXMark runner is a command too: it launches through the CLI's own entry point
                       if not m.startswith(("stram.client", "stram.__main__", "stram.nexmark.runner"))
                       for d in deps if d.startswith("stram.client"))
    assert offenders == []
    # and for real: the master's process imports nothing of the CLI side
    code = "import sys, stram.master.process.master; print(sorted(m for m in sys.modules if m.startswith('stram.client')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_module_imports_another_modules_private_names():
    mods = _modules()
    private: list[str] = []
    for name, path in mods.items():
        _imports(name, path, set(mods), private=private)
    assert private == []


def _product_modules() -> dict[str, str]:
    return {name: path for name, path in _modules().items() if not name.endswith(("_pb2", "_pb2_grpc"))}


def test_modules_stay_small():
    big = {name: n for name, path in _product_modules().items()
           if (n := sum(1 for _ in open(path))) > MAX_LINES and name not in LARGE}
    assert big == {}, f"modules over {MAX_LINES} lines: {big}"


def test_every_module_opens_with_its_purpose():
    missing = sorted(name for name, path in _product_modules().items()
                     if not ast.get_docstring(ast.parse(open(path).read(), path)))
    assert missing == []


def test_nothing_cites_a_file_outside_the_repository():
    """Docs, code and tests name files that are here (``STYLE.md``, ``../shared``: not)."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    bad = []
    for rel in tracked:
        if not rel.endswith((".py", ".md", ".yaml", ".cfg")) or rel == "tests/unit/tools/test_layout.py" \
                or not (ROOT / rel).is_file():  # deleted in the working tree, not yet committed
            continue
        text = (ROOT / rel).read_text(errors="replace")
        bad += [f"{rel}: {word}" for word in ("STYLE.md", "DESIGN.md", "INTERFACES.md", "LAYOUT.md", "../shared")
                if word in text]
    assert bad == []


@pytest.mark.slow
def test_a_wheel_holds_one_package_and_installs_beside_proto_plus(tmp_path):
    """``pip wheel .`` gives ``stram/`` and its dist-info alone; installed into a fresh venv beside
    proto-plus (whose top-level package is ``proto``), both import and ``stram launch`` works."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q",
                    "-w", str(wheels)], check=True, cwd=tmp_path)
    (wheel,) = wheels.glob("stram-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"stram", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "stram/master/admin/static/console/index.html" in names and "stram/wire/stram.proto" in names

    venv = tmp_path / "venv"
    # the system's packages (grpcio, pyarrow, ...) serve as the dependencies; the wheel's stram comes first
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True)
    subprocess.run([*pip, "proto-plus>=1.26,<2"], check=True)
    work = tmp_path / "work"
    work.mkdir()
    check = ("import importlib.util, proto, stram, stram.master, stram.wire\n"
             "assert hasattr(proto, 'Message') and hasattr(proto, 'Field'), proto.__file__\n"
             f"assert stram.__file__.startswith({str(venv)!r}), stram.__file__\n"
             f"assert stram.master.__file__.startswith({str(venv)!r}), stram.master.__file__\n"
             "assert [n for n in ('appmaster', 'container', 'scripts') if importlib.util.find_spec(n)] == []\n"
             "print('ok')")
    out = subprocess.run([py, "-c", check], cwd=work, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr

    words = (ROOT / "specs" / "data" / "words.txt").read_text()
    (work / "words.txt").write_text(words)
    (work / "app.yaml").write_text((ROOT / "specs" / "wordcount.yaml").read_text())
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "STRAM_HOME": str(tmp_path / "home")}
    run = subprocess.run([str(venv / "bin" / "stram"), "launch", "app.yaml", "-D", "operators.reader.path=words.txt",
                          "-D", f"operators.out.path={work / 'out'}"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "SUCCEEDED" in run.stderr, run.stdout + run.stderr
    sums, maxima, _ = read_counts(work / "out")
    assert maxima == dict(word_truth(work / "words.txt"))
