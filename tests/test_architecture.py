"""The package's import graph: no cycles, no private names across modules, folders in order.

The modules are read with ``ast`` (nothing is imported or run). Every import of a module
of the package counts, at module level and inside functions. Every module lives in a
folder named for its concept (the root holds only the package's face), and the folders
are floors, in the order of ``FOLDERS`` (the layers of the design notes, bottom up): a
module imports only from its own folder or a folder below it. A new folder gets its
honest place in ``FOLDERS``; an exception gets a line in ``ALLOWED_UPWARD`` with its reason.
"""
from __future__ import annotations

import ast
import importlib
import pathlib
import pkgutil
import types
from dataclasses import dataclass

PACKAGE = "quantax_lite"
ROOT = pathlib.Path(__file__).resolve().parent.parent / PACKAGE

# The folders, bottom up (each imports only from itself and those before it), with the
# layer of the design notes each belongs to.
FOLDERS = [
    "utils",  # L0 foundations: checks, errors, speed choices, batching (chunk_map), meshes, files
    "hilbert",  # L1 physics: spin configurations and sectors
    "geometry",  # L1: lattices, symmetry groups, Brillouin zones
    "operators",  # L1: the Hamiltonian contract, bond Hamiltonians, local operators, sign rules
    "exact",  # L1: exact diagonalization and dynamics, reference energies
    "hamiltonians",  # L1: the registry of named models
    "models",  # L2 ansatz: networks, heads, symmetrization, their registry
    "sampler",  # L3 estimation: Metropolis and exact samplers, transition rules
    "stats",  # L3: Markov-chain statistics, estimates from a run's history
    "optimizer",  # L3: per-sample Jacobians, SR / MinSR, preconditioners, the update
    "observables",  # L3: observables, their registry, one Lanczos step
    "driver",  # L4 driver: VMC, memory budget, draws, checkpoints, run folders, warm starts
    "evolution",  # L4: time evolution (TDVP), beside the VMC driver
    "recipes",  # L5 recipe: physics choices to a complete run
    "cli",  # L6 application: the command, its options, training / measure / evolve, reports
]
# the modules of the root: the package's face
ROOT_MODULES = {"__init__", "__main__"}
MAX_ROOT_MODULES = 6
MAIN = len(FOLDERS)  # __main__: runs the command
API = len(FOLDERS) + 1  # the package's __init__: re-exports everything; nothing inside imports it

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
    """The floor of ``module``: its folder's place in ``FOLDERS`` (None: not in a folder listed)."""
    if module == PACKAGE:
        return API
    parts = module.split(".")[1:]
    if parts == ["__main__"]:
        return MAIN
    return FOLDERS.index(parts[0]) if parts[0] in FOLDERS and len(parts) > 1 or parts[0] in FOLDERS else None


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


def test_every_module_is_in_a_folder_of_the_plan():
    missing = sorted(m for m in MODULES if _layer(m) is None)
    assert not missing, f"move these modules into a folder of FOLDERS (tests/test_architecture.py): {missing}"
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(FOLDERS), f"folders not in FOLDERS: {sorted(folders - set(FOLDERS))}; " \
                                    f"FOLDERS without a folder: {sorted(set(FOLDERS) - folders)}"


def test_the_root_holds_only_the_package_face():
    root = sorted(p.stem for p in ROOT.glob("*.py"))
    assert set(root) == ROOT_MODULES and len(root) <= MAX_ROOT_MODULES, root


def _packages() -> list[str]:
    return sorted(m for m, p in MODULES.items() if p.name == "__init__.py")


def test_no_name_is_both_a_module_and_something_else():
    """For every package and every module inside it, the package's attribute of that name
    is the module (a function of the same name would hide it)."""
    bad = []
    for name in _packages():
        package = importlib.import_module(name)
        for info in pkgutil.iter_modules(package.__path__):
            if info.name == "__main__":  # importing it runs the command
                continue
            importlib.import_module(f"{name}.{info.name}")
            value = getattr(package, info.name)
            if not isinstance(value, types.ModuleType):
                bad.append(f"{name}.{info.name} is a module and a {type(value).__name__}")
    assert not bad, "\n".join(bad)


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
            bad.append(f"{i.importer} (floor {hi}):{i.line} imports {i.target} (floor {lo})")
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
