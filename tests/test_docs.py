"""The code blocks of docs/*.md and README.md run as written."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
PAGES = [p for p in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"] if BLOCK.search(p.read_text())]


# quickstart.md trains and resumes runs: slow
@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p.name == "quickstart.md" else p
                                  for p in PAGES], ids=lambda p: p.name)
def test_code_blocks_run(page, tmp_path, monkeypatch):
    blocks = BLOCK.findall(page.read_text())
    monkeypatch.chdir(tmp_path)  # files a page writes land in a temporary folder
    namespace = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)
        except Exception as err:  # name the block that failed
            raise AssertionError(f"{page.name}, python block {i} failed: {err!r}\n{code}") from err


# The figures of the pages' tables (and every other figure) are tied to their results:
# tests/test_figures.py.


# ---------------------------------------------------------------- the API page against the code
API = ROOT / "docs" / "api.md"
SECTION = re.compile(r"^## `(quantax_lite[\w.]*)`")
FIRST_CELL = re.compile(r"^\| (`.*?`) \|")
SIGNATURE = re.compile(r"`([A-Za-z_][\w.]*)\((.*?)\)(?: -> [^`]*)?`")
BULLET = re.compile(r"^- `([A-Za-z_]\w*)\((.*?)\)(?: -> [^`]*)?`")
RECIPE_SECTION = "### `Recipe`: fields and methods"


def documented_signatures(text):
    """``(line, module, name, parameters)`` of every signature the API page documents: the
    first cell of each table row under a module's heading, and the method bullets of the
    ``Recipe`` section."""
    module, in_recipe = None, False
    for n, line in enumerate(text.splitlines(), 1):
        m = SECTION.match(line)
        if m:
            module, in_recipe = m.group(1), False
            continue
        if line.startswith("#"):
            in_recipe = line.startswith(RECIPE_SECTION)
            continue
        m = FIRST_CELL.match(line)
        if m and module:
            for s in SIGNATURE.finditer(m.group(1)):
                yield n, module, s.group(1), s.group(2)
            continue
        m = BULLET.match(line)
        if m and in_recipe:
            yield n, "quantax_lite.recipes", "Recipe." + m.group(1), m.group(2)


def _resolve(module, name):
    """The object ``name`` (``f``, ``Class.method``) of ``module``, of the package root, or
    of one of ``module``'s submodules."""
    import importlib
    import pkgutil

    bases = [module, "quantax_lite"]
    package = importlib.import_module(module)
    if hasattr(package, "__path__"):
        bases += [f"{module}.{m.name}" for m in pkgutil.iter_modules(package.__path__)]
    for base in bases:
        obj = importlib.import_module(base)
        try:
            for part in name.split("."):
                obj = getattr(obj, part)
            return obj
        except AttributeError:
            continue
    raise AttributeError(name)


def _doc_parameters(params):
    """``[(name, kind, default expression or None)]`` of a documented parameter list."""
    import ast

    args = ast.parse(f"def _({params}): pass").body[0].args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [(a.arg, "positional", d) for a, d in zip(positional, defaults)]
    if args.vararg:
        out.append((args.vararg.arg, "*", None))
    out += [(a.arg, "keyword", d) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        out.append((args.kwarg.arg, "**", None))
    return out


def _same_value(expression, actual) -> bool:
    """Whether the documented default ``expression`` evaluates to the code's ``actual`` one
    (``...`` in the page: a default it does not spell out)."""
    import ast

    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np

    if isinstance(expression, ast.Constant) and expression.value is Ellipsis:
        return True
    try:
        value = eval(ast.unparse(expression), {"jnp": jnp, "nn": nn, "np": np, "jax": jax})
    except Exception:
        return False
    if value is actual:
        return True
    try:
        return type(value) is type(actual) and bool(value == actual) or (
            isinstance(value, (int, float)) and isinstance(actual, (int, float))
            and not isinstance(actual, bool) and not isinstance(value, bool) and value == actual)
    except Exception:
        return False


def signature_mismatches(text):
    """Every documented signature whose parameter names, kinds or defaults differ from the code's."""
    import functools
    import inspect

    import flax.linen as nn

    kinds = {inspect.Parameter.POSITIONAL_ONLY: "positional", inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
             inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.KEYWORD_ONLY: "keyword",
             inspect.Parameter.VAR_KEYWORD: "**"}
    out = []
    for n, module, name, params in documented_signatures(text):
        where = f"docs/api.md:{n}: {name}({params})"
        if params.startswith("...") or params == "**fields":
            continue  # "the same arguments as above"; a dataclass's fields, checked apart
        try:
            obj = _resolve(module, name)
        except AttributeError:
            out.append(f"{where}: no such name in {module}")
            continue
        if isinstance(obj, (property, functools.cached_property)):
            continue  # built per instance: no signature without one
        skip = {"self", "cls"}
        if isinstance(obj, type) and issubclass(obj, nn.Module):
            skip |= {"parent", "name"}  # every flax module has them
        try:
            code = [(p.name, kinds[p.kind], p.default) for p in inspect.signature(obj).parameters.values()
                    if p.name not in skip]
        except (TypeError, ValueError):
            out.append(f"{where}: the code has no signature")
            continue
        try:
            doc = _doc_parameters(params)
        except SyntaxError:
            out.append(f"{where}: not a parameter list")
            continue
        if [(a, k) for a, k, _ in doc] != [(a, k) for a, k, _ in code]:
            out.append(f"{where}: the code has ({', '.join(a for a, _, _ in code)})")
            continue
        for (a, _, d), (_, _, real) in zip(doc, code):
            if d is None and real is not inspect.Parameter.empty:
                out.append(f"{where}: {a} has the default {real!r} in the code, none on the page")
            elif d is not None and real is inspect.Parameter.empty:
                out.append(f"{where}: {a} has a default on the page, none in the code")
            elif d is not None and not _same_value(d, real):
                out.append(f"{where}: {a} defaults to {real!r} in the code")
    return out


def test_api_signatures_match_the_code():
    """Every signature docs/api.md documents has the code's parameter names, kinds and defaults."""
    text = API.read_text()
    assert len(list(documented_signatures(text))) > 150  # the page is read, not skipped
    bad = signature_mismatches(text)
    assert not bad, "docs/api.md differs from the code:\n" + "\n".join(bad)


def test_signature_check_can_fail():
    text = API.read_text()
    for old, new in (("chunk_size=None, use_scan=False", "chunk_size=None, use_scan=True"),
                     ("| `make_mesh(devices=None) -> Mesh` |", "| `make_mesh(devices=None, axis=0) -> Mesh` |")):
        assert old in text, old
        assert signature_mismatches(text.replace(old, new)), new


def test_recipe_fields_match_the_dataclass():
    """The field table of the Recipe section holds every field of ``Recipe``, in order,
    with its default."""
    import ast
    import dataclasses

    from quantax_lite import Recipe

    text = API.read_text()
    assert RECIPE_SECTION in text, f"docs/api.md: the section {RECIPE_SECTION!r} is missing"
    section = text.split(RECIPE_SECTION, 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| `(.*?)` \|", section, re.M)
    fields = dataclasses.fields(Recipe)
    assert [name for name, _ in rows] == [f.name for f in fields], (
        "docs/api.md, Recipe fields: the table lists " + str([n for n, _ in rows])
        + ", the dataclass " + str([f.name for f in fields]))
    for (name, default), field in zip(rows, fields):
        expected = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        assert _same_value(ast.parse(default, mode="eval").body, expected), (
            f"docs/api.md, Recipe field {name}: default {default} on the page, {expected!r} in the code")


# ---------------------------------------------------------------- links
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(text):
    """GitHub's anchors of a page's headings."""
    out = set()
    for heading in re.findall(r"^#+ (.*)$", FENCE_ANY.sub("", text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


FENCE_ANY = re.compile(r"^```.*?^```", re.S | re.M)


def test_links_resolve():
    """Every relative link of README.md and docs/*.md names a file that exists, and an
    anchor a heading of that page."""
    bad = []
    for page in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        text = FENCE_ANY.sub("", page.read_text())
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                bad.append(f"{page.name}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
                bad.append(f"{page.name}: {target} (no such heading)")
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_index_links_every_page():
    """docs/index.md links every page of docs/."""
    index = (ROOT / "docs" / "index.md").read_text()
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md"))
               if p.name != "index.md" and f"]({p.name})" not in index]
    assert not missing, f"docs/index.md does not link {missing}"


# A command a reader copies: fenced shell blocks (not python ones) and inline code spans
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"(`+)(.+?)\1", re.S)
COMMAND = re.compile(r"(?:^|[;&|(]\s*|\$\s+)(?:quantax-lite|python3?|pytest)\b|^--[a-z]")
REDIRECT_WORD = re.compile(r"\d*&?")  # what may stand before a redirection: `>f`, `2>f`, `&>f`


def unquoted_redirects_in_words(command: str) -> list[str]:
    """The shell words of ``command`` holding a ``>`` outside quotes after other characters
    of the same word (``translations>full@600``: the shell reads ``translations`` and
    writes to a file ``full@600``); a redirection of its own (``> out``, ``2>&1``) is not one."""
    bad, word, quote, i = [], "", None, 0
    while i < len(command):
        c = command[i]
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"':
                i += 1
        elif c in "'\"":
            quote = c
        elif c == "\\":
            i += 1
        elif c.isspace():
            word = ""
        elif c == ">" and not REDIRECT_WORD.fullmatch(word) and not word.endswith(">"):
            end = command.find(" ", i)
            bad.append(word + command[i:end if end >= 0 else len(command)])
        if not c.isspace():
            word += c
        i += 1
    return bad


def documented_commands(text: str):
    """``(kind, command)`` of every command line in fenced non-python blocks (continuation
    lines joined, a ``$`` prompt dropped) and every inline code span that is a command."""
    for lang, body in FENCE.findall(text):
        if lang.strip().lower() in ("python", "py", "pycon", "json", "text", "toml", "yaml"):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if COMMAND.search(line):
                yield "block", line
    prose = FENCE.sub("", text)
    for _, span in INLINE.findall(prose):
        span = span.strip()
        if COMMAND.search(span):
            yield "inline", span


def test_unquoted_redirect_finder():
    assert unquoted_redirects_in_words("quantax-lite train --symmetry translations>full@600") == [
        "translations>full@600"]
    assert unquoted_redirects_in_words("quantax-lite train --symmetry=translations>full@600 --iters 9")
    for ok in ("quantax-lite train --symmetry 'translations>full@600'",
               'quantax-lite train --symmetry "translations>full@600"',
               "python benchmarks/accuracy.py > out.txt 2>&1", "pytest >log", "python x.py &>log"):
        assert unquoted_redirects_in_words(ok) == [], ok
    found = list(documented_commands("```bash\nquantax-lite train \\\n  --symmetry a>b@3\n```\n"
                                     "and `--symmetry c>d@4` but `Recipe(symmetry=\"e>f@5\")`\n"))
    assert [k for k, _ in found] == ["block", "inline"]


def test_documented_commands_quote_a_greater_than():
    """An unquoted ``>`` inside an option value (``--symmetry translations>full@600``) would
    redirect the command's output to a file in every shell: every command of the README and
    docs/*.md quotes it (``--symmetry 'translations>full@600'``)."""
    bad = []
    for page in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        for kind, command in documented_commands(page.read_text()):
            for word in unquoted_redirects_in_words(command):
                bad.append(f"{page.name} ({kind}): {word!r} in {command[:120]!r}")
    assert not bad, "quote these option values:\n" + "\n".join(bad)
