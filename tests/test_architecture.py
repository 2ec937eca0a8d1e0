"""The package's import graph: no cycles, no private names across modules, layers in order.

The modules are read with ``ast`` (nothing is imported or run). Every import of a module
of the package counts, at module level and inside functions. The layers are those of
``docs`` / the design notes: a module imports only from its own layer or a lower-numbered
one. A new module gets a line in ``LAYERS`` (its honest place); an exception gets a line
in ``ALLOWED_UPWARD`` with its reason.
"""
from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

PACKAGE = "quantax_lite"
ROOT = pathlib.Path(__file__).resolve().parent.parent / PACKAGE

# Layer of each module (a package's entry covers its submodules; the longest prefix wins).
LAYERS = {
    # L0 foundations: checks, speed and precision choices, batching, meshes, files
    "_validate": 0, "errors": 0, "tuning": 0, "autotune": 0, "compile_cache": 0, "utils": 0,
    # L1 physics
    "lattice": 1, "hilbert": 1, "symmetry": 1, "operators": 1, "spin_operators": 1, "exact": 1,
    "sign_rules": 1, "references": 1, "ground_sector": 1, "brillouin": 1, "hamiltonians": 1,
    # L2 ansatz
    "models": 2,
    # L3 estimation
    "sampler": 3, "stats": 3, "estimates": 3, "jacobian": 3, "_blocked": 3, "sr": 3, "preconditioners": 3,
    "natural_gradient": 3, "observables": 3, "lanczos": 3,
    # L4 driver
    "memory": 4, "checkpoint": 4, "run_folder": 4, "vmc": 4, "draws": 4, "wavefunction_io": 4, "warm_start": 4,
    "evolution": 4,  # TDVP: the equation, regularizations, integrators and the loop, beside the VMC driver
    # L5 recipe
    "recipes": 5,
    # L6 application
    # (training and measure_run run a recipe in a run folder and write its report)
    "cli": 6, "options": 6, "report": 6, "training": 6, "measure_run": 6, "__main__": 6,
    "evolve_run": 6,  # quantax-lite evolve: TDVP of a recipe's network in a run folder
}
API = 7  # the package's __init__: re-exports everything; nothing inside imports it

# (importer, imported) pairs allowed against the layer order, each with its reason.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    target: str  # the module imported from
    name: str | None  # the name taken from it (None: the module itself)
    in_function: bool
    line: int


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(modules: dict[str, pathlib.Path]) -> list[Import]:
    found = []
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]

        def visit(node, in_function, module=module, package=package, path=path):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ImportFrom):
                    if child.level:
                        base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                        target = ".".join(base + ([child.module] if child.module else []))
                    else:
                        target = child.module or ""
                    if target.split(".")[0] == PACKAGE:
                        for alias in child.names:
                            sub = f"{target}.{alias.name}"
                            if sub in modules:  # ``from . import tuning``: the module itself
                                found.append(Import(module, sub, None, in_function, child.lineno))
                            else:
                                found.append(Import(module, target, alias.name, in_function, child.lineno))
                elif isinstance(child, ast.Import):
                    for alias in child.names:
                        if alias.name.split(".")[0] == PACKAGE:
                            found.append(Import(module, alias.name, None, in_function, child.lineno))
                inner = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                visit(child, in_function or inner)

        visit(ast.parse(path.read_text(), filename=str(path)), False)
    return found


def _layer(module: str) -> int | None:
    if module == PACKAGE:
        return API
    parts = module.split(".")[1:]
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYERS:
            return LAYERS[key]
    return None


def _graph(modules, imports) -> dict[str, set[str]]:
    """module -> the modules its imports run: the target, and the target's packages below
    the root that are not the importer's own (importing ``a.b.c`` runs ``a/b/__init__``)."""
    graph = {m: set() for m in modules}
    for imp in imports:
        if imp.target == imp.importer:
            continue
        graph[imp.importer].add(imp.target)
        own = {imp.importer.rsplit(".", n)[0] for n in range(imp.importer.count("."))}
        parts = imp.target.split(".")
        for n in range(2, len(parts)):
            parent = ".".join(parts[:n])
            if parent not in own and parent != imp.importer:
                graph[imp.importer].add(parent)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(set(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    cycles = []
    for comp in components:  # the shortest way from the component's first module back to it
        start = min(comp)
        came_from, frontier = {}, [start]
        while start not in came_from:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & comp):
                    if w not in came_from:
                        came_from[w] = v
                        nxt.append(w)
            frontier = nxt
        path, v = [start], came_from[start]
        while v != start:
            path.append(v)
            v = came_from[v]
        cycles.append([start] + path[1:][::-1] + [start])
    return cycles


MODULES = _modules()
IMPORTS = _imports(MODULES)


def test_every_module_has_a_layer():
    missing = sorted(m for m in MODULES if _layer(m) is None)
    assert not missing, f"give these modules a layer in LAYERS of tests/test_architecture.py: {missing}"
    stale = sorted(k for k in LAYERS if not any(m == f"{PACKAGE}.{k}" or m.startswith(f"{PACKAGE}.{k}.")
                                                 for m in MODULES))
    assert not stale, f"LAYERS names modules that do not exist: {stale}"


def test_imports_resolve_to_modules_of_the_package():
    unknown = sorted({(i.importer, i.target) for i in IMPORTS if i.target not in MODULES})
    assert not unknown, f"imports of modules that do not exist: {unknown}"


def test_no_import_cycles():
    cycles = _cycles(_graph(MODULES, IMPORTS))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_private_names_across_modules():
    """``from module import _name`` only from a module whose own name starts with ``_``
    (package-internal, such as ``_validate``, ``_blocked`` or ``models/_checks``)."""
    bad = [
        f"{i.importer}:{i.line} imports {i.name} from {i.target}"
        for i in IMPORTS
        if i.name is not None and i.name.startswith("_") and i.target != i.importer
        and not i.target.rpartition(".")[2].startswith("_")
    ]
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_imports_follow_the_layers():
    bad = []
    for i in IMPORTS:
        if i.target == PACKAGE and i.importer != PACKAGE:
            bad.append(f"{i.importer}:{i.line} imports the package's __init__ (import the module instead)")
            continue
        lo, hi = _layer(i.target), _layer(i.importer)
        if lo is not None and hi is not None and lo > hi and (i.importer, i.target) not in ALLOWED_UPWARD:
            bad.append(f"{i.importer} (L{hi}):{i.line} imports {i.target} (L{lo})")
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)
    unused = [k for k in ALLOWED_UPWARD if not any((i.importer, i.target) == k for i in IMPORTS)]
    assert not unused, f"ALLOWED_UPWARD entries no longer needed: {unused}"


def test_count_function_level_imports():
    """Imports of the package inside functions (printed: the number to bring down)."""
    inside = [i for i in IMPORTS if i.in_function]
    statements = {(i.importer, i.line) for i in inside}
    by_module: dict[str, int] = {}
    for module, _ in statements:
        by_module[module] = by_module.get(module, 0) + 1
    print(f"\nfunction-level imports of the package: {len(statements)} statements "
          f"({', '.join(f'{m.removeprefix(PACKAGE + chr(46))} {n}' for m, n in sorted(by_module.items()))})")
    assert statements  # the walk sees them (cli imports lazily on purpose)
