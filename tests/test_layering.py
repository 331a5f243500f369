"""The import graph stays layered (ARCHITECTURE.md): no cycles, no import from a lower stage up to a
higher one, and `python -m envbuilder.certify` runs with the standard library (and torch) only.

Every import counts, including the lazy ones inside functions: a lazy upward import is still a
dependency of the lower stage on the higher one.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "envbuilder"

# Rank of every top-level package / module of envbuilder, highest first as in ARCHITECTURE.md.
# A module may import its own package and anything of a strictly lower rank.
LAYERS: dict[str, float] = {
    "__main__": 13, "cli": 12,
    "nightly": 11.5,  # orchestrates the stages for the nightly job, below only the CLI
    "report": 11,
    "certify": 10,
    "export": 9,
    "image": 8,
    "bundle": 7,
    "kernels": 6,
    "audit": 5.5,  # reads a lock directory; image's SBOM, report and nightly carry its findings
    "lock": 5,
    "render": 4,
    "resolve": 3,
    "host": 2, "parallel": 2,
    "matrix": 1,
    # base: imported by all, importing only the base
    "__init__": 0, "errors": 0, "atomic": 0, "console": 0, "paths": 0, "troubleshoot": 0, "canonical": 0,
    "choices": 0, "procs": 0, "uvbin": 0, "templating": 0, "toml_cache": 0, "jsonread": 0, "safetext": 0, "progress": 0,
    "archlist": 0, "elf": 0,
    "dsse": 0, "tls": 0,
}
# certify's host-side helpers; every other certify module runs inside the environment
CERTIFY_HOST_SIDE = {"expectations", "runner", "verify", "sign", "flow"}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def _imports(name: str, path: Path, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
    return {m for m in found if m == "envbuilder" or m.startswith("envbuilder.")}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_package_has_a_layer() -> None:
    units = {_unit(m) for m in _modules()}
    missing = sorted(units - set(LAYERS))
    assert not missing, f"add {missing} to LAYERS here and to ARCHITECTURE.md's diagram"


def test_no_upward_imports() -> None:
    mods = _modules()
    bad = []
    for name, path in mods.items():
        src = _unit(name)
        for target in _imports(name, path, top_level_only=False):
            if target not in mods:
                continue  # `from envbuilder.x import name` also yields envbuilder.x.name
            dst = _unit(target)
            if dst != src and LAYERS[dst] >= LAYERS[src] and LAYERS[src] > 0:
                bad.append(f"{name} -> {target} ({src} {LAYERS[src]} imports {dst} {LAYERS[dst]})")
    assert not bad, "imports against the layering:\n" + "\n".join(sorted(bad))


def test_no_import_cycles() -> None:
    """Import-time (top-level) imports between modules form no cycle."""
    mods = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        graph[name] = {t for t in _imports(name, path, top_level_only=True) if t in mods and t != name}
        # importing a.b.c runs a/__init__ and a/b/__init__ first
        graph[name] |= {p for t in set(graph[name]) for p in _parents(t) if p in mods and p != name}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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
            if len(comp) > 1 and not _package_init_only(comp):
                cycles.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


def _package_init_only(comp: list[str]) -> bool:
    """A package __init__ re-exporting its submodules, which import siblings by full path, is not a cycle
    Python trips on (the submodule runs inside the __init__'s own import)."""
    inits = [m for m in comp if (PKG.parent / m.replace(".", "/") / "__init__.py").exists()]
    return len(inits) == 1 and all(m.startswith(inits[0] + ".") or m == inits[0] for m in comp)


def test_base_imports_only_base() -> None:
    mods = _modules()
    bad = [f"{n} -> {t}" for n, p in mods.items() if LAYERS[_unit(n)] == 0
           for t in _imports(n, p, top_level_only=False) if t in mods and LAYERS[_unit(t)] != 0]
    assert not bad, bad


def _in_environment_modules() -> dict[str, Path]:
    return {m: p for m, p in _modules().items()
            if m.startswith("envbuilder.certify") and m.rsplit(".", 1)[-1] not in CERTIFY_HOST_SIDE}


# what the training probes import: they run as their own processes, only in an environment that has the stack
STACK = {"torch", "lightning", "pytorch_lightning", "nemo", "megatron"}


def _top_level_imports(path: Path) -> set[str]:
    """Modules imported at import time (module body, including its try/if blocks)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    body: list[ast.stmt] = list(tree.body)
    for node in tree.body:
        if isinstance(node, (ast.Try, ast.If)):
            body += node.body + node.orelse + [s for h in getattr(node, "handlers", []) for s in h.body]
    for node in body:
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module if node.module.startswith("envbuilder") else node.module.split(".")[0])
    return out


def test_in_environment_certify_imports_stdlib_and_torch_only() -> None:
    """At import time, in-environment modules use the standard library, torch and envbuilder's
    stdlib-only base modules; anything else is imported lazily, inside a try, where it is probed."""
    allowed_envbuilder = {"envbuilder", "envbuilder.archlist", "envbuilder.canonical", "envbuilder.choices",
                          "envbuilder.errors", "envbuilder.jsonread", "envbuilder.safetext", "envbuilder.procs",
                          "envbuilder.atomic"}
    bad = []
    for name, path in _in_environment_modules().items():
        for mod in _top_level_imports(path):
            if mod in sys.stdlib_module_names or mod in STACK or mod == "__future__":
                continue
            if mod.startswith("envbuilder.certify") or mod in allowed_envbuilder:
                continue
            bad.append(f"{name} imports {mod}")
    assert not bad, bad


def test_in_environment_certify_needs_no_host_packages() -> None:
    """`python -m envbuilder.certify` imports with click, rich, tomlkit, jinja2 and docker unavailable.

    Modules that import torch or the training stack at the top run only where it is installed (the
    previous test checks what else they import).
    """
    mods = sorted(m for m, p in _in_environment_modules().items() if not STACK & _top_level_imports(p))
    assert "envbuilder.certify.__main__" in mods and "envbuilder.certify.level0" in mods
    code = f"""
import importlib, importlib.abc, sys
BLOCKED = ("click", "rich", "tomlkit", "jinja2", "docker")
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked in this test: {{name}}")
        return None
sys.meta_path.insert(0, Block())
for m in {mods!r}:
    importlib.import_module(m)
leaked = sorted(n for n in sys.modules if n.split(".")[0] in BLOCKED)
assert not leaked, leaked
print("ok", len({mods!r}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok")
    # and the entry point itself answers --help in that state
    helped = subprocess.run([sys.executable, "-c", code.replace('print("ok"', 'sys.argv = ["x", "--help"]\n'
                             'import runpy\ntry:\n    runpy.run_module("envbuilder.certify", run_name="__main__")\n'
                             'except SystemExit as e:\n    assert e.code in (0, None), e.code\nprint("ok"')],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert helped.returncode == 0 and "usage" in helped.stdout.lower(), helped.stderr[-3000:]


def test_readme_pipeline_table_names_every_stage_package() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## The pipeline"):]
    table = table[: table.index("\n## ")] if "\n## " in table else table
    packages = sorted(p.parent.name for p in PKG.glob("*/__init__.py") if p.parent.name != "cli")
    missing = [p for p in packages if f"`envbuilder/{p}/`" not in table]
    assert not missing, f"README's pipeline table lacks {missing}"


def test_tests_mirror_the_packages() -> None:
    """tests/<package>/test_*.py for every package's tests; only base-module and cross-cutting tests
    (errors, faults, signals, layering, ...) sit directly in tests/. A test directory with no package of its
    own name is a misplaced test."""
    tests = REPO / "tests"
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    dirs = {p.parent.name for p in tests.glob("*/test_*.py")}
    assert dirs <= packages, f"test directories without a package: {sorted(dirs - packages)}"
