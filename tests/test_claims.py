"""Every figure of the README and docs/*.md is a recorded result, and every statement that
something is tested names a test that does it.

Rules (a mismatch names the file, the line and the figure):

- **Pages**: README.md and every docs/*.md, except docs/research_log.md, which is skipped
  by rule: its figures are historical (measured once, with the code of their date), it
  says so at its top, and each of its entries is dated (checked below).
- **Figures**: in prose (outside code blocks, inline code and HTML comments), a number with
  a unit (ms, s, µs, min, h, %, MiB, GiB, GFLOP/s, TFLOP/s, ms/sample, or a decimal factor
  such as "1.4x"), a number in scientific notation (3.6e-6) and a decimal with four or more
  decimals (an energy such as −0.70178020); in a table, also every number of a column whose
  header names a unit, and in the other columns every cell that is a number (parameters,
  steps: a decimal or an integer of at least 100, two or more significant digits). Small integers (sites, devices, images) and short decimals without a
  unit (J2 = 0.5, a learning rate) are parameters, not figures. Numbers are compared as whole
  tokens without their sign: "6.9" never matches inside "16.9".
- **Backing**: a figure with a unit is a value of some ``benchmarks/results/*.json`` in that
  unit, as a text rounds it (see ``_formats``); the unit comes from the JSON key (``*_s``,
  ``seconds``: s, ms, µs, min, h; ``*_ms``; ``*ms_per_sample``; ``*bytes``: MiB, GiB;
  ``*gflops``, ``*tflops``; ``speedup*``: a factor). A unitless figure is a value of a JSON,
  one the generator of the results table derives from ``accuracy.json`` (published relative
  errors, energies per site), a stored reference energy of the package (per site or times
  the cluster's sites), or a numeric literal of ``tests/*.py``, of ``quantax_lite/`` (a
  default or a tolerance) or of a python block of the docs that the default test run executes.
- **Estimates and quotations**: a figure nothing backs stays only when marked: "(estimate)"
  right after it, or "about" right before it and the word "estimate" in its sentence; or
  when its sentence cites the publication it comes from (authors and year).
- **Lead's allow-list**: ``UNTRACED`` lists figures of README.md and docs/scaling.md that
  cannot be traced yet (those two pages are edited elsewhere); each is reported, and an entry
  that no longer occurs fails, so the list only shrinks.
- **Tested statements**: a sentence saying that something is tested, is checked by the tests
  or runs in the test suite names an existing test file (``tests/test_x.py``) or is in
  ``SUITE_STATEMENTS`` with the tests it means; one that says the default run (the test
  suite runs / checks) must mean tests not marked slow, one that says "slow tests" or
  ``pytest -m slow`` tests marked slow.
- A test count the README states is within 5% of what the default run collects.
"""
from __future__ import annotations

import ast
import importlib.util
import io
import json
import pathlib
import re
import shlex
import subprocess
import sys
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
RESEARCH_LOG = ROOT / "docs" / "research_log.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README] + [p for p in DOCS if p != RESEARCH_LOG]


def _load(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


readme_table = _load(ROOT / "benchmarks" / "readme_table.py", "readme_table_for_claims")

# ---------------------------------------------------------------- finding figures
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"(`+).+?\1", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
LINK_TARGET = re.compile(r"\]\([^)]*\)")
LEFT = r"(?<![\w./])(?<![\w.]-)"  # a whole token: no digit, letter or point before it (a sign may be)
NUMBER = LEFT + r"(\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
UNITS = (r"ms/sample|GFLOP/s|TFLOP/s|ms|µs|us|sec|seconds?|s|min|minutes?|h|hours?|%|MiB|GiB|MB|GB|"
         r"[x×](?=[\s,;:.)]|$)")
WITH_UNIT = re.compile(NUMBER + r"\s?(" + UNITS + r")(?![\w/])")
SCIENTIFIC = re.compile(LEFT + r"(\d+(?:\.\d+)?e[-+]?\d+)(?![\w.])")
LONG_DECIMAL = re.compile(LEFT + r"(\d+\.\d{4,})(?![\w.])")
UNIT_OF = {"ms": "ms", "s": "s", "sec": "s", "second": "s", "seconds": "s", "min": "min", "minute": "min",
           "minutes": "min", "h": "h", "hour": "h", "hours": "h", "%": "%", "MiB": "MiB", "GiB": "GiB",
           "MB": "MiB", "GB": "GiB", "µs": "µs", "us": "µs", "GFLOP/s": "GFLOP/s", "TFLOP/s": "TFLOP/s",
           "ms/sample": "ms/sample", "x": "x", "×": "x"}
HEADER_UNITS = r"(ms/sample|GFLOP/s|TFLOP/s|ms|µs|s|min|minutes|MiB|GiB)"
HEADER_UNIT = re.compile(r"\((?:[^()]*?,\s*)?" + HEADER_UNITS + r"\)")  # "step, min (ms)": ms
HEADER_WORD = re.compile(r"(?<![\w/])" + HEADER_UNITS + r"(?!\w)")  # "memory MiB F / T": MiB
NUMERIC_CELL = re.compile(r"\**-?\d+(?:\.\d+)?(?:e[-+]?\d+)?\**(?: \([\w ]+\))?")  # "2424", "834 (time limit)"
TABLE_NUMBER = re.compile(LEFT + r"(\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?![\w.]|\s?(?:" + UNITS + r")(?![\w/]))")


def normal(token: str) -> str:
    """``3.6e-06`` and ``3.6e-6`` alike (the exponent unpadded, no ``+``), no sign."""
    token = token.replace("−", "-").lstrip("-+")
    if "e" in token:
        mantissa, exponent = token.split("e")
        return f"{mantissa}e{int(exponent)}"
    return token


def _blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def prose(text: str) -> str:
    """The text with code blocks, inline code, HTML comments and link targets blanked out
    (same length and lines: positions still name the line)."""
    for pattern in (COMMENT, FENCE, INLINE, LINK_TARGET):
        text = pattern.sub(_blank, text)
    return text.replace("−", "-").replace("et al.", "et al,")  # a citation does not end a sentence


def _sentence(text: str, start: int, end: int) -> str:
    left = max(text.rfind(". ", 0, start), text.rfind("\n\n", 0, start), text.rfind("|", 0, start),
               text.rfind(": ", 0, start), text.rfind("; ", 0, start))
    rights = [i for i in (text.find(". ", end), text.find("\n\n", end), text.find("|", end)) if i >= 0]
    return re.sub(r"\s+", " ", text[left + 1:min(rights) if rights else len(text)]).strip()


def _tables(text: str):
    """``(line index, cells, header cells)`` of every data row of every markdown table."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) - 1:
        if lines[i].lstrip().startswith("|") and re.match(r"^\s*\|(\s*:?-+:?\s*\|)+\s*$", lines[i + 1]):
            header = [c.strip() for c in lines[i].strip().strip("|").split("|")]
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                yield j, [c for c in lines[j].strip().strip("|").split("|")], header
                j += 1
            i = j
        else:
            i += 1


def figures(text: str) -> list[tuple[int, str, str, str]]:
    """``(line, number, unit, sentence)`` of every figure of ``text`` (unit "" for a unitless
    one), by the rules of this module's docstring."""
    clean = prose(text)
    line_of = lambda pos: clean.count("\n", 0, pos) + 1  # noqa: E731
    out, seen = [], set()
    for pattern, unit in ((WITH_UNIT, None), (SCIENTIFIC, ""), (LONG_DECIMAL, "")):
        for m in pattern.finditer(clean):
            if (m.start(1), m.end(1)) in seen:
                continue
            seen.add((m.start(1), m.end(1)))
            u = UNIT_OF[m.group(2)] if unit is None else unit
            if u == "x" and "." not in m.group(1):
                continue  # "4x4", "16× the images": sizes and counts, not measured factors
            out.append((line_of(m.start()), normal(m.group(1)), u, _sentence(clean, m.start(), m.end())))
    for index, cells, header in _tables(clean):
        for k, cell in enumerate(cells):
            unit = (HEADER_UNIT.search(header[k]) or HEADER_WORD.search(header[k])) if k < len(header) else None
            numeric = NUMERIC_CELL.fullmatch(cell.strip()) is not None
            for m in TABLE_NUMBER.finditer(cell):
                token = m.group(1)
                if unit is None and (not numeric or "e" not in token and _significant(token) < 2
                                     or "." not in token and "e" not in token and int(token) < 100):
                    continue  # words, parameters and small counts
                u = UNIT_OF.get(unit.group(1), unit.group(1)) if unit else ""
                if unit is None and ("e" in token or LONG_DECIMAL.fullmatch(token)):
                    continue  # found above
                out.append((index + 1, normal(token), u, cell.strip()))
    return sorted(out)


CITATION = re.compile(r"\b[A-Z][\w-]+(?: et al\.?|,? and [A-Z][\w-]+)[^()]{0,40}?\(?(?:19|20)\d\d\b")


def quoted(sentence: str) -> bool:
    """A figure quoted from a publication: its sentence cites it (authors and year)."""
    return CITATION.search(sentence) is not None


def estimate(number: str, sentence: str) -> bool:
    """A figure marked as an estimate: "(estimate)" right after it (its unit between), or
    "about" right before it and "estimate" in its sentence."""
    n = re.escape(number)
    if re.search(r"(?<![\w.])" + n + r"\s?\S{0,9}\s\(estimate\)", sentence):
        return True
    return "estimate" in sentence.lower() and re.search(r"\babout\s+-?" + n + r"(?![\w.])", sentence) is not None


# ---------------------------------------------------------------- what backs a figure
TRACE = 20  # a list of more numbers than this is a trace (a training curve), not a result


def _leaves(node, key=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, str(k))
    elif isinstance(node, list):
        if sum(isinstance(v, (int, float)) for v in node) > TRACE:
            return
        for v in node:
            yield from _leaves(v, key)
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield key, float(node)


def _significant(token: str) -> int:
    return len(token.split("e")[0].replace("-", "").replace(".", "").lstrip("0"))


def _formats(x: float):
    """``x`` as a text may quote it; a rounding to one significant digit ("2 min" of 1.7 min)
    only where it is exact or within 10% (9 ms of 9.04 ms), so that small round figures are
    not backed by coincidence."""
    x = abs(x)
    for spec in (".0f", ".1f", ".2f", ".3g", ".2g", ".0e", ".1e", ".2e"):
        token = normal(format(x, spec))
        if _significant(token) >= 2 or abs(float(token) - x) <= 0.1 * x:
            yield token
    if x == int(x):
        yield str(int(x))


def _long_formats(x: float):
    """An energy as a text quotes it: 4 to 10 decimals."""
    for d in range(4, 11):
        yield normal(format(abs(x), f".{d}f"))


def _unit_values(key: str, x: float):
    """``(unit, value)`` pairs a JSON value of ``key`` stands for."""
    key = key.lower()
    if key.endswith("_s") or key == "seconds" or "second" in key:
        yield from (("s", x), ("ms", 1e3 * x), ("µs", 1e6 * x), ("min", x / 60), ("h", x / 3600))
    if "minute" in key:
        yield "min", x
    if key.endswith("_ms"):
        yield from (("ms", x), ("s", x / 1e3))
    if "ms_per_sample" in key:
        yield from (("ms/sample", x), ("ms", x))
    if "bytes" in key:
        yield from (("MiB", x / 2**20), ("GiB", x / 2**30))
    if key.endswith("mib"):
        yield "MiB", x
    if key.endswith("gib"):
        yield "GiB", x
    if "gflops" in key:
        yield "GFLOP/s", x
    if "tflops" in key:
        yield from (("TFLOP/s", x), ("GFLOP/s", 1e3 * x))
    if "speedup" in key or "faster" in key:
        yield "x", x


def _numeric_literals(source: str):
    """Every number literal of Python ``source``."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.NUMBER:
                try:
                    yield float(tok.string.replace("_", ""))
                except ValueError:
                    pass
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return


def _default_run_blocks():
    """The python blocks of the pages tests/test_docs.py runs without the slow mark."""
    blocks = re.compile(r"```python\n(.*?)```", re.S)
    for page in DOCS + [README]:
        if _page_runs_by_default(page.name):
            yield from blocks.findall(page.read_text())


_BACKED = None


def backed_figures() -> set[tuple[str, str]]:
    """``(number, unit)`` of every figure something in the repository backs (module docstring)."""
    global _BACKED
    if _BACKED is not None:
        return _BACKED
    out: set[tuple[str, str]] = set()
    for path in sorted(RESULTS.glob("*.json")):
        for key, x in _leaves(json.loads(path.read_text())):
            out.update((f, u) for f in _formats(x) for u in ("", "%"))
            out.update((f, "%") for f in _formats(100 * x))
            out.update((f, "") for f in _long_formats(x))
            for unit, value in _unit_values(key, x):
                out.update((f, unit) for f in _formats(value))
    rows = json.loads((RESULTS / "accuracy.json").read_text())
    for r in rows:  # what the results table's generator derives from a row
        sites = readme_table.n_sites(r)
        for x in (r["energy"] / sites, r["exact_energy"] / sites, r["energy_error"] / sites):
            out.update((f, "") for f in list(_formats(x)) + list(_long_formats(x)))
        for token in re.findall(r"\d+(?:\.\d+)?e-?\d+", readme_table.published(r, sites)):
            out.add((normal(token), ""))
    from quantax_lite import recipes
    from quantax_lite.exact import diagonalization as exact
    for table in (exact.REFERENCE_ENERGY_PER_SITE, recipes.LITERATURE_ENERGY_PER_SITE):
        for (lattice, *_), e in table.items():
            sites = recipes.parse_lattice(lattice).n_sites
            out.update((f, "") for x in (e, e * sites) for f in list(_formats(x)) + list(_long_formats(x)))
    sources = [p.read_text() for p in sorted((ROOT / "tests").glob("*.py"))]
    sources += [p.read_text() for p in sorted((ROOT / "quantax_lite").rglob("*.py"))]
    sources += list(_default_run_blocks())
    for source in sources:
        for x in _numeric_literals(source):
            out.update((f, "") for f in list(_formats(x)) + list(_long_formats(x)))
            out.add((normal(repr(x)), ""))
    _BACKED = out
    return out


# Figures of the lead's pages (README.md, docs/scaling.md) that nothing in the repository
# backs yet. Each is listed in the report of the change that added this test, for the
# lead to back (a JSON value), mark ("(estimate)") or remove; an entry that no longer
# occurs fails test_untraced_list_is_current, so the list only shrinks. No other page may
# be listed here.
UNTRACED: dict[tuple[str, str, str], str] = {
    # (page name, number, unit): why it cannot be traced yet. Empty: every figure of both
    # pages was traced when this test was written.
}


def untraced(page: pathlib.Path) -> list[tuple[int, str, str, str]]:
    backed = backed_figures()
    return [(line, n, u, s) for line, n, u, s in figures(page.read_text())
            if (n, u) not in backed and not estimate(n, s) and not quoted(s)]


def test_figure_finder():
    text = ("It took 16.9 min and 98 ms; error 3.6e-06 ± 2.5e-6, 12% (`--diag-shift 1e-3`), "
            "v5e chip, 4x4, 600 steps, spin-1/2, 1.43x faster, 16× the images.\n\n"
            "About 7 s (about 7 s is an estimate), E = −0.70178020 and 8 s (estimate).\n\n"
            "| lattice | step (ms) | parameters | J2 |\n| --- | --- | --- | --- |\n| 4×4 | 98 | 2424 | 0.5 |\n")
    found = [(n, u) for _, n, u, _ in figures(text)]
    assert sorted(found) == sorted([("16.9", "min"), ("98", "ms"), ("12", "%"), ("1.43", "x"), ("7", "s"),
                                    ("7", "s"), ("8", "s"), ("3.6e-6", ""), ("2.5e-6", ""), ("0.70178020", ""),
                                    ("98", "ms"), ("2424", "")]), found
    assert [line for line, n, _, _ in figures(text) if n == "2424"] == [7]  # the line of the figure
    assert estimate("7", "about 7 s (an estimate)") and not estimate("7", "about 7 s")
    assert estimate("8", "E = 0.7 and 8 s (estimate)")
    assert not estimate("7", "17 s, an estimate of about 17 s")
    assert [n for _, n, _, _ in figures("it took 16.9 min")] == ["16.9"]  # whole tokens: never "6.9"
    assert "2" not in list(_formats(1.7)) and "1.7" in list(_formats(1.7))  # no rounding to one digit
    assert "1e-5" in list(_formats(1e-5)) and "2e-5" not in list(_formats(1.7e-5))


def test_a_changed_figure_fails_with_its_place():
    """The check catches a figure edited alone, and names the file, the line and the figure."""
    backed = backed_figures()
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    step = json.loads((RESULTS / "vmc_step.json").read_text())["rows"][0]["step_s"]
    wrong = f"{step * 1e3 + 7:.0f} ms"
    assert (normal(wrong.split()[0]), "ms") not in backed
    edited = text + f"\nThe W1 step took {wrong}.\n"
    bad = [(line, n, u) for line, n, u, s in figures(edited) if (n, u) not in backed and not estimate(n, s)]
    assert bad == [(edited.count("\n"), wrong.split()[0], "ms")], bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_figures_are_recorded_results(page):
    """Every figure of the page is backed (module docstring), marked as an estimate, or (on
    the lead's two pages only) in UNTRACED."""
    missing = [f"{page.relative_to(ROOT)}:{line}: {n}{' ' + u if u else ''} in: {s[:140]!r}"
               for line, n, u, s in untraced(page) if (page.name, n, u) not in UNTRACED]
    assert not missing, ("figures that no benchmarks/results/*.json, test or code value backs (back them, "
                         "remove them, or mark them '(estimate)'):\n" + "\n".join(missing))


def test_untraced_list_is_current():
    for (name, n, u), why in UNTRACED.items():
        assert name in ("README.md", "scaling.md"), f"UNTRACED holds only the lead's pages, not {name}"
        page = README if name == "README.md" else ROOT / "docs" / name
        assert (n, u) in {(m, v) for _, m, v, _ in untraced(page)}, (
            f"{name}: {n} {u} ({why}) is traced or gone now: remove it from UNTRACED")


def test_research_log_is_dated_and_says_it_is_historical():
    """The page the figure check skips says that its figures are historical, and each of
    its entries starts with the date of its measurements."""
    text = RESEARCH_LOG.read_text()
    intro = text.split("\n## ", 1)[0]
    assert "historical" in intro.lower(), "docs/research_log.md: its introduction must say its figures are historical"
    headings = re.findall(r"^## (.*)$", text, re.M)
    assert headings
    undated = [h for h in headings if not re.match(r"\d{4}-\d{2}(-\d{2})?\b", h)]
    assert not undated, f"docs/research_log.md: entries without a date: {undated}"


INTERNAL = re.compile(r"\bissues? #?\d+|(?<![\w/-])#\d+\b|\bPR #?\d+|\bsessions?\b|\bthe row before\b", re.I)


@pytest.mark.parametrize("page", DOCS + [README], ids=lambda p: p.name)
def test_no_internal_history(page):
    """No page refers to internal issue numbers, working sessions or "the row before": a
    reader cannot follow them. External references name their repository
    (``openxla/xla#47945``)."""
    bad = [f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
           for text in [COMMENT.sub(_blank, page.read_text())] for m in INTERNAL.finditer(text)]
    assert not bad, "internal history in the docs:\n" + "\n".join(bad)


# ---------------------------------------------------------------- the README's table
def test_readme_table_is_generated():
    """The README's results block, and the same block in docs/benchmarks.md, are exactly what
    benchmarks/readme_table.py prints from the JSONs."""
    for page in (README, ROOT / "docs" / "benchmarks.md"):
        block = readme_table.block_of(page.read_text())
        assert block is not None, f"{page.name}: the generated results block (benchmarks/readme_table.py) is missing"
        assert block == readme_table.generate(), f"python benchmarks/readme_table.py --write {page.relative_to(ROOT)}"


def test_readme_table_commands_are_the_presets():
    """Each row's command is the options ``benchmarks/accuracy.py --only NAME`` runs (its
    ``SYSTEMS`` args, plus ``--time-limit`` at its share of the row's budget): the command
    quoted beside a figure is the one that produced it."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        accuracy = _load(ROOT / "benchmarks" / "accuracy.py", "accuracy_for_claims")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    for row in json.loads((RESULTS / "accuracy.json").read_text()):
        words = shlex.split(row["options"])
        if "--time-limit" in words:
            i = words.index("--time-limit")
            spec = accuracy.SYSTEMS[row["system"]]
            minutes = spec.get("minutes", accuracy.DEFAULT_MINUTES)
            assert float(words[i + 1]) == pytest.approx(accuracy.TRAINING_SHARE * minutes), row["system"]
            del words[i:i + 2]
        assert words == accuracy.SYSTEMS[row["system"]]["args"], (
            f"{row['system']}: accuracy.json was made with other options than accuracy.py's SYSTEMS; "
            "rerun the row (python benchmarks/accuracy.py --only NAME) or restore its options")
    commands = re.findall(r"`quantax-lite train (.*?)`", readme_table.generate())
    assert [shlex.split(c) for c in commands] == [shlex.split(r["options"]) for r in
                                                 json.loads((RESULTS / "accuracy.json").read_text())]


# ---------------------------------------------------------------- "tested" statements
CLAIM = re.compile(r"\btested\b|\btest suite\b|\bthe tests? (?:checks?|runs?)\b|\bslow tests?\b|"
                   r"pytest -m slow|tests/test_\w+\.py", re.I)
NEGATED = re.compile(r"\b(?:not|never|un)\s*tested\b", re.I)
SAYS_SLOW = re.compile(r"slow tests?|-m slow", re.I)
SAYS_DEFAULT = re.compile(r"test suite (?:runs|checks)|runs? in the test suite|the default run|"
                          r"the tests? (?:checks?|runs?)", re.I)


def _test_functions(test_file: str):
    """``{name: slow}`` of the test functions of ``tests/test_file`` (slow: marked itself, by
    its module's ``pytestmark`` or by every one of its parametrizations)."""
    source = (ROOT / "tests" / test_file).read_text()
    tree = ast.parse(source)
    module_slow = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                      and "slow" in ast.unparse(n.value) for n in tree.body)

    def slow(node):
        decorators = [ast.unparse(d) for d in node.decorator_list]
        if module_slow or any("slow" in d and "parametrize" not in d for d in decorators):
            return True
        if any("parametrize" in d for d in decorators) and "mark.slow" in source:
            return "partly"  # some parametrizations marked slow (pytest.param(..., marks=...))
        return False
    return {n.name: slow(n) for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}


def _not_slow(test_file: str, function: str) -> bool:
    """Whether ``function`` of ``tests/test_file`` exists and runs (at least in part) by default."""
    return _test_functions(test_file).get(function) in (False, "partly")


def _slow(test_file: str, function: str | None = None) -> bool:
    """Whether ``function`` (else some test) of ``tests/test_file`` is marked slow."""
    functions = _test_functions(test_file)
    return functions.get(function) in (True, "partly") if function else any(functions.values())


def _page_runs_by_default(page: str) -> bool:
    """Whether tests/test_docs.py runs the python blocks of ``page`` without the slow mark."""
    test_docs = _load(ROOT / "tests" / "test_docs.py", "test_docs_for_claims")
    params = next(m for m in test_docs.test_code_blocks_run.pytestmark if m.name == "parametrize").args[1]
    for p in params:
        value, marks = (p.values[0], p.marks) if hasattr(p, "values") else (p, ())
        if pathlib.Path(value).name == page:
            return not any(m.name == "slow" for m in marks)
    return False


# (page, words of the sentence) -> the check that makes it true
SUITE_STATEMENTS = {
    ("chunk_map.md", "test suite runs this page"): lambda: _page_runs_by_default("chunk_map.md"),
    ("api.md", "the test suite runs the block below"): lambda: _page_runs_by_default("api.md"),
    ("api.md", "test suite runs from one"): lambda: _page_runs_by_default("api.md"),
    ("quickstart.md", "this page's code runs in the slow tests"): lambda: not _page_runs_by_default("quickstart.md"),
    ("physics.md", "the test suite checks that, without it, the chain samples the wrong distribution"):
        lambda: _not_slow("test_sampler.py", "test_anti_aligned_exchange_needs_its_hastings_ratio"),
    ("observables.md", "the tests check this over repeated runs"):
        lambda: any(slow is not True for slow in _test_functions("test_observables.py").values()),
    ("scaling.md", "how the test suite runs two processes"): lambda: _not_slow("test_chunk_map.py",
                                                                               "test_two_processes_gloo"),
    ("scaling.md", "paths are tested on 8 simulated CPU devices and on two local processes"):
        lambda: _not_slow("test_chunk_map.py", "test_two_processes_gloo"),
    ("scaling.md", "mode runs on the CPU in the slow tests"):
        lambda: _slow("test_benchmark_scripts.py", "test_accelerator_suite_quick_end_to_end"),
    ("scaling.md", "The test suite checks on the CPU what a"):
        lambda: any(slow is not True for slow in _test_functions("test_accelerator_precision.py").values()),
    ("README.md", "runs the long end-to-end tests the default run leaves out"):
        lambda: _slow("test_notebooks.py") and _slow("test_frustrated_training.py"),
}


def _statements(page: pathlib.Path):
    """``(line, sentence)`` of every sentence of ``page`` that says something is tested
    (prose and inline code: a test file is named in code)."""
    raw = page.read_text()
    text = FENCE.sub(_blank, COMMENT.sub(_blank, raw))
    seen = set()
    for m in CLAIM.finditer(text):
        sentence = _sentence(text, m.start(), m.end()).replace("`", "")
        if sentence in seen:
            continue
        seen.add(sentence)
        if NEGATED.search(sentence) and not re.search(r"(?<!not )(?<!un)tested", sentence):
            continue
        yield text.count("\n", 0, m.start()) + 1, m.group(0), sentence


def test_tested_statements_are_true():
    """Every "tested" statement names a test file that exists, or is in SUITE_STATEMENTS with
    a check that holds; default-run statements mean tests that are not slow, slow-test
    statements tests that are."""
    unknown, false = [], []
    for page in DOCS + [README]:
        if page == RESEARCH_LOG:
            continue
        for line, word, sentence in _statements(page):
            where = f"{page.relative_to(ROOT)}:{line}: {sentence[:160]!r}"
            checks = [check for (name, words), check in SUITE_STATEMENTS.items()
                      if name == page.name and re.sub(r"\s+", " ", words) in sentence]
            named = re.findall(r"tests/(test_\w+\.py)(?:::(\w+))?", sentence)
            if checks:
                if not all(check() for check in checks):
                    false.append(where)
                continue
            if not named:
                unknown.append(where)
                continue
            for test_file, function in named:
                if not (ROOT / "tests" / test_file).exists():
                    false.append(f"{where} (no tests/{test_file})")
                elif SAYS_SLOW.search(sentence) and not _slow(test_file, function or None):
                    false.append(f"{where} (said slow, is not)")
                elif SAYS_DEFAULT.search(sentence) and not SAYS_SLOW.search(sentence) and not any(
                        slow is not True for f, slow in _test_functions(test_file).items()
                        if not function or f == function):
                    false.append(f"{where} (said to run by default, is slow)")
    assert not false, "statements about the tests that do not hold:\n" + "\n".join(false)
    assert not unknown, ("statements about the tests that name no test (name the file, or add the statement "
                         "and its check to SUITE_STATEMENTS):\n" + "\n".join(unknown))


def test_suite_statement_checks_hold():
    for key, check in SUITE_STATEMENTS.items():
        assert check(), key
    assert not _page_runs_by_default("quickstart.md")  # slow: its statement says so
    assert not _not_slow("test_benchmark_scripts.py", "test_accelerator_suite_quick_end_to_end")


# ---------------------------------------------------------------- test counts
COUNT = re.compile(r"(?<![\w.])(\d[\d,]*)\s+tests\b")


def test_readme_test_count():
    """A number of tests the README states is within 5% of what `pytest` (the default run)
    collects; the README states none now, and this collects only when it does."""
    counts = [int(c.replace(",", "")) for c in COUNT.findall(prose(README.read_text()))]
    if not counts:
        return
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    m = re.search(r"(\d+)(?:/\d+)? tests? collected", proc.stdout)
    assert m, proc.stdout[-2000:]
    collected = int(m.group(1))
    for c in counts:
        assert abs(c - collected) <= 0.05 * collected, f"README says {c} tests; the default run collects {collected}"
