"""The sources a figure of the docs is tied to, and how a tied figure is compared with its
source: the half of ``benchmarks/_figures.py`` (whose docstring holds the rules) that reads
files, walks paths, evaluates expressions, converts units and rounds as written.
"""
from __future__ import annotations

import ast
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def normal(token: str) -> str:
    token = token.replace("−", "-").replace(",", "")
    if "e" in token:
        mantissa, exponent = token.split("e")
        token = f"{mantissa}e{int(exponent)}"
    return token


class TieError(Exception):
    pass


_FILES: dict = {}


def load(name: str):
    """A result file (``NAME.json``) or a Python file's top-level literal assignments."""
    if name not in _FILES:
        path = RESULTS / name if name.endswith(".json") else ROOT / name
        if not path.is_file():
            raise TieError(f"no file {path.relative_to(ROOT)}")
        if name.endswith(".json"):
            _FILES[name] = json.loads(path.read_text())
        elif name.endswith(".md"):  # the page's python blocks (tests/test_docs.py runs them)
            _FILES[name] = {}
            for block in re.findall(r"```python\n(.*?)```", path.read_text(), re.S):
                _FILES[name].update(_literals(ast.parse(block)))
        else:
            _FILES[name] = _literals(ast.parse(path.read_text()))
    return _FILES[name]


def _literal(node):
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return {k.arg: _literal(k.value) for k in node.keywords}
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)}
    try:
        return ast.literal_eval(node)
    except ValueError:
        arithmetic = (ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop)
        if all(isinstance(n, arithmetic) for n in ast.walk(node)):  # 15 * 2**20
            return eval(compile(ast.Expression(node), "<literal>", "eval"), {"__builtins__": {}})
        return NotALiteral(ast.unparse(node))


class NotALiteral(str):
    pass


def _literals(tree) -> dict:
    """``{name: value}`` of a module's top-level assignments (``Class: {field: default}``,
    ``function: {parameter: default}``)."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = _literals(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):  # its parameters' defaults
            a = node.args
            named = a.posonlyargs + a.args
            out[node.name] = {p.arg: _literal(d) for p, d in zip(named[len(named) - len(a.defaults):], a.defaults)}
            out[node.name].update({p.arg: _literal(d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
        targets = [node.target] if isinstance(node, ast.AnnAssign) and node.value else getattr(node, "targets", [])
        for t in targets:
            if isinstance(t, ast.Name):
                out[t.id] = _literal(node.value)
    return out


STEP = re.compile(r"\.?([A-Za-z_][\w-]*)|\[((?:[^\[\]\"']|\"[^\"]*\"|'[^']*')*)\]")


def walk(obj, path: str, where: str):
    """The value at ``path`` (``.key``, ``[i]``, ``[field=value]``, ``[literal]``) in ``obj``."""
    pos, path = 0, path.strip()
    while pos < len(path):
        m = STEP.match(path, pos)
        if not m:
            raise TieError(f"{where}: cannot read the path {path!r} from {path[pos:]!r}")
        pos = m.end()
        if m.group(1) is not None:
            key = m.group(1)
        else:
            sel = m.group(2).strip()
            if re.fullmatch(r"-?\d+", sel):
                key = int(sel)
            elif re.match(r"[\w-]+\s*=", sel):
                want = dict((k.strip(), _norm(v)) for k, v in (p.split("=", 1) for p in sel.split(",")))
                if not isinstance(obj, list):
                    raise TieError(f"{where}: [{sel}] selects in a list, {path[:m.start()]!r} is not one")
                found = [x for x in obj if isinstance(x, dict) and all(_norm(x.get(k)) == v for k, v in want.items())]
                if len(found) != 1:
                    raise TieError(f"{where}: [{sel}] matches {len(found)} elements of {path[:m.start()] or 'it'}")
                obj = found[0]
                continue
            else:
                try:
                    key = ast.literal_eval(sel)
                except (ValueError, SyntaxError):
                    raise TieError(f"{where}: [{sel}] is neither an index, a field=value nor a literal") from None
        try:
            obj = obj[key]
        except (KeyError, IndexError, TypeError):
            raise TieError(f"{where}: no {key!r} at {path[:m.start()] or 'the top'!r}") from None
    if isinstance(obj, NotALiteral):
        raise TieError(f"{where}: {path} is not a literal in its file ({obj})")
    return obj


def _norm(value) -> str:
    """A cell's or a field's text as a selector compares it: "J1-J2", "j1j2"; "4×4", "4x4";
    numbers by value ("1", 1.0)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(float(value))
    text = str(value).strip().strip("`*\"'").strip()
    if re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
        return repr(float(text))
    return re.sub(r"(?<=\w)-(?=\w)", "", text.lower().replace("×", "x"))


_SELECTOR = r"\[(?:[^\[\]\"']|\"[^\"]*\"|'[^']*')*\]"  # [...], brackets inside quotes allowed
REF = re.compile(r"(?<![\w.\]])((?:[\w/.-]+\.(?:json|py|md):)?(?:[A-Za-z_][\w-]*|" + _SELECTOR + r")"
                 r"(?:\.[A-Za-z_][\w-]*|" + _SELECTOR + r")*)(?![\w-])(?!\s*\()")
FUNCTIONS = {"abs": abs, "min": min, "max": max, "len": len}
KEY_UNITS = [(r"ms_per_sample$|_ms$", "ms"), (r"_us$", "µs"), (r"_s$|seconds|_sec$", "s"),
             (r"minutes$|_min$", "min"), (r"bytes", "bytes"), (r"_mib$", "MiB"), (r"_gib$", "GiB"),
             (r"gflops", "GFLOP/s"), (r"tflops", "TFLOP/s"), (r"percent|pct", "%")]
SCALE = {"s": ("time", 1), "ms": ("time", 1e-3), "µs": ("time", 1e-6), "min": ("time", 60), "h": ("time", 3600),
         "ms/sample": ("time", 1e-3), "bytes": ("bytes", 1), "MiB": ("bytes", 2**20), "GiB": ("bytes", 2**30),
         "GFLOP/s": ("flops", 1e9), "TFLOP/s": ("flops", 1e12), "%": ("%", 1)}


def evaluate(base, source: str, where: str) -> tuple[float, str | None]:
    """``(value, the unit of its key)`` of a source (a path from ``base``, ``FILE:PATH``, or an
    arithmetic expression of them; an expression's unit is None: it holds the figure's unit)."""
    values, names = [], []

    def ref(m):
        text = m.group(1)
        if text in FUNCTIONS:
            return text
        prefix = re.match(r"[\w/.-]+\.(?:json|py|md):", text)
        file, path = (prefix.group()[:-1], text[prefix.end():]) if prefix else ("", text)
        obj = load(file) if file else base
        if obj is None:
            raise TieError(f"{where}: {text} has no file (begin the tie with FILE:)")
        values.append(walk(obj, path, where))
        names.append(re.findall(r"[A-Za-z_][\w-]*", path)[-1] if re.search(r"[A-Za-z_]", path) else "")
        return f"_v{len(values) - 1}"
    expression = REF.sub(ref, source.strip())
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise TieError(f"{where}: cannot read {source!r}") from None
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Call, ast.Add, ast.Sub,
               ast.Mult, ast.Div, ast.Pow, ast.USub, ast.UAdd)
    if not all(isinstance(n, allowed) for n in ast.walk(tree)):
        raise TieError(f"{where}: {source!r} is not an arithmetic expression of paths")
    value = eval(compile(tree, where, "eval"), {"__builtins__": {}}, {**FUNCTIONS, **{f"_v{i}": v for i, v in
                                                                                     enumerate(values)}})
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TieError(f"{where}: {source!r} is {value!r}, not a number")
    single = isinstance(tree.body, ast.Name) and tree.body.id == "_v0"
    unit = next((u for pattern, u in KEY_UNITS if re.search(pattern, names[0].lower())), "") if single else None
    return float(value), unit


def convert(value: float, key_unit: str | None, unit: str, where: str) -> float:
    """The value of a key with ``key_unit`` in the figure's ``unit`` (module docstring)."""
    if key_unit is None or key_unit == unit or key_unit == "ms" and unit == "ms/sample":
        return value
    if key_unit == "":
        return 100 * value if unit == "%" else value
    if not unit or unit not in SCALE or SCALE[unit][0] != SCALE[key_unit][0]:
        raise TieError(f"{where}: the key holds {key_unit}, the figure is in {unit or 'no unit'} "
                       f"(give its unit: FIGURE UNIT = ..., or write the conversion)")
    return value * SCALE[key_unit][1] / SCALE[unit][1]


def as_written(value: float, text: str) -> str:
    """``value`` rounded as ``text`` is written (its decimals, or its significant digits in
    scientific notation), signed only where ``text`` is."""
    v = value if text.startswith("-") else abs(value)
    digits = text.lstrip("-")
    if "e" in digits:
        mantissa = digits.split("e")[0]
        return normal(format(v, f".{len(mantissa.partition('.')[2])}e"))
    return normal(format(v, f".{len(digits.partition('.')[2])}f"))
