"""Every figure the README quotes is a recorded result, and what the docs say runs in the
test suite runs there.

- The README's results table is the output of ``benchmarks/readme_table.py`` (which reads
  only ``benchmarks/results/*.json``), and each row's command is its preset in
  ``benchmarks/accuracy.py``.
- Every other figure of the README (a number with a unit: ms, s, min, %, ...; or a
  relative error in scientific notation such as 3.6e-6) is a value of some
  ``benchmarks/results/*.json``, formatted: whole tokens compared, so "6.9" does not match
  "16.9". A figure that no JSON backs says so: "about" before it and the word "estimate"
  in its sentence.
- A sentence of README.md or docs/*.md saying that something runs in the test suite names
  something a test of the default run (not marked slow) runs.
- A test count the README states is within 5% of what the default run collects.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _load(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


readme_table = _load(ROOT / "benchmarks" / "readme_table.py", "readme_table_for_claims")

# ---------------------------------------------------------------- figures
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE = re.compile(r"(`+).+?\1", re.S)
COMMENT = re.compile(r"<!--.*?-->", re.S)
NUMBER = r"(?<![\w.\-])(\d+(?:\.\d+)?)"
UNITS = r"ms|s|sec|seconds?|min|minutes?|h|hours?|%|MiB|GiB|MB|GB"
WITH_UNIT = re.compile(NUMBER + r"\s?(" + UNITS + r")(?![\w])")
SCIENTIFIC = re.compile(r"(?<![\w.\-])(\d+(?:\.\d+)?e[-+]?\d+)(?![\w.])")
UNIT_OF = {"ms": "ms", "s": "s", "sec": "s", "second": "s", "seconds": "s", "min": "min", "minute": "min",
           "minutes": "min", "h": "h", "hour": "h", "hours": "h", "%": "%", "MiB": "MiB", "GiB": "GiB",
           "MB": "MiB", "GB": "GiB"}


def normal(token: str) -> str:
    """``3.6e-06`` and ``3.6e-6`` alike (the exponent unpadded, no ``+``)."""
    token = token.replace("−", "-")
    if "e" in token:
        mantissa, exponent = token.split("e")
        return f"{mantissa}e{int(exponent)}"
    return token


def prose(text: str) -> str:
    """The text without code blocks, inline code and HTML comments (option values are no figures)."""
    return INLINE.sub(" ", FENCE.sub(" ", COMMENT.sub(" ", text)))


def figures(text: str) -> list[tuple[str, str, str]]:
    """``(number, unit, sentence)`` of every figure of ``text``'s prose (unit "" for a relative
    error in scientific notation)."""
    out = []
    for sentence in re.split(r"(?<=[.;:!?])\s+|\n\s*\n|\n\|", prose(text).replace("−", "-")):
        for m in WITH_UNIT.finditer(sentence):
            out.append((normal(m.group(1)), UNIT_OF[m.group(2)], sentence))
        for m in SCIENTIFIC.finditer(sentence):
            out.append((normal(m.group(1)), "", sentence))
    return out


def estimate(number: str, sentence: str) -> bool:
    """A figure marked as an estimate: "about" right before it, "estimate" in its sentence."""
    return "estimate" in sentence.lower() and re.search(r"\babout\s+" + re.escape(number), sentence) is not None


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
    only where it is exact, so that small round figures are not backed by coincidence."""
    for spec in (".0f", ".1f", ".2f", ".3g", ".2g", ".0e", ".1e", ".2e"):
        token = normal(format(x, spec))
        if _significant(token) >= 2 or float(token) == x:
            yield token
    if x == int(x):
        yield str(int(x))


def backed_figures() -> set[tuple[str, str]]:
    """``(number, unit)`` of every value of every ``benchmarks/results/*.json``, in the formats
    a text quotes it: any value unitless (scientific notation) and as a percentage (of a
    fraction, or as it is); a value of seconds (key ``*_s``, ``seconds``, ``*second*``) in s,
    ms and min; of minutes (``*minute*``) in min; of ``*_ms`` in ms and s."""
    out: set[tuple[str, str]] = set()
    for path in sorted(RESULTS.glob("*.json")):
        for key, x in _leaves(json.loads(path.read_text())):
            key = key.lower()
            for f in _formats(x):
                out.add((f, ""))
                out.add((f, "%"))
            for f in _formats(100 * x):
                out.add((f, "%"))
            if key.endswith("_s") or key == "seconds" or "second" in key:
                for unit, scale in (("s", 1.0), ("ms", 1e3), ("min", 1 / 60), ("h", 1 / 3600)):
                    out.update((f, unit) for f in _formats(x * scale))
            if "minute" in key:
                out.update((f, "min") for f in _formats(x))
            if key.endswith("_ms"):
                out.update((f, "ms") for f in _formats(x))
                out.update((f, "s") for f in _formats(x / 1e3))
            if key.endswith("mib") or key.endswith("gib"):
                out.update((f, key[-3:].replace("mib", "MiB").replace("gib", "GiB")) for f in _formats(x))
    return out


def test_figure_finder():
    text = ("It took 16.9 min and 98 ms; error 3.6e-06 ± 2.5e-6, 12% (`--diag-shift 1e-3`), "
            "v5e chip, 4x4, 600 steps, spin-1/2.\n\nAbout 7 s (about 7 s is an estimate).")
    found = [(n, u) for n, u, _ in figures(text)]
    assert found == [("16.9", "min"), ("98", "ms"), ("12", "%"), ("3.6e-6", ""), ("2.5e-6", ""),
                     ("7", "s"), ("7", "s")], found
    assert estimate("7", "about 7 s (an estimate)") and not estimate("7", "about 7 s")
    assert not estimate("7", "17 s, an estimate of about 17 s")
    assert [n for n, _, _ in figures("it took 16.9 min")] == ["16.9"]  # whole tokens: never "6.9"
    assert list(_formats(1.7)) == ["1.7", "1.70", "1.7", "1.7", "1.7e0", "1.70e0"]  # never "2"
    assert "1e-5" in list(_formats(1e-5)) and "2e-5" not in list(_formats(1.7e-5))


def test_readme_table_is_generated():
    """The README's results block is exactly what benchmarks/readme_table.py prints from the JSONs."""
    block = readme_table.block_of(README.read_text())
    assert block is not None, "README.md: the generated results block (benchmarks/readme_table.py) is missing"
    assert block == readme_table.generate(), "python benchmarks/readme_table.py --write README.md"
    assert readme_table.main(["--check", str(README)]) == 0


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
    # the table quotes them for the shell: the shell's words are the recorded options
    commands = re.findall(r"`quantax-lite train (.*?)`", readme_table.generate())
    assert [shlex.split(c) for c in commands] == [shlex.split(r["options"]) for r in
                                                 json.loads((RESULTS / "accuracy.json").read_text())]


def test_readme_figures_are_recorded_results():
    """Every figure of the README outside the generated table is a formatted value of some
    benchmarks/results/*.json (whole tokens), or is marked as an estimate."""
    text = README.read_text()
    block = readme_table.block_of(text) or ""
    backed = backed_figures()
    missing = [(n, u, s.strip()[:160]) for n, u, s in figures(text.replace(block, " "))
               if (n, u) not in backed and not estimate(n, s)]
    assert not missing, ("figures of README.md that no benchmarks/results/*.json holds (back them, remove "
                         "them, or say 'about' and 'estimate'):\n" + "\n".join(map(repr, missing)))


def test_generated_figures_come_from_the_results():
    """The generated block's figures: those a JSON holds as such, and the derived ones (the
    published relative errors) recomputed from the JSON by the generator only."""
    block = readme_table.generate()
    backed = backed_figures()
    derived = [(n, u) for n, u, _ in figures(block) if (n, u) not in backed]
    rows = json.loads((RESULTS / "accuracy.json").read_text())
    published = {readme_table.published(r, readme_table.n_sites(r)) for r in rows}
    for n, u in derived:
        assert u == "" and any(n in p for p in published), (n, u)


# ---------------------------------------------------------------- "runs in the test suite"
SUITE_CLAIM = re.compile(r"test suite runs|runs? in the test suite|test suite\W+runs", re.I)


def _not_slow(test_file: str, function: str) -> bool:
    """Whether ``function`` of ``tests/test_file`` exists and is not marked slow (itself or
    by its module's ``pytestmark``)."""
    tree = ast.parse((ROOT / "tests" / test_file).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            if "slow" in ast.unparse(node.value):
                return False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return not any("slow" in ast.unparse(d) for d in node.decorator_list)
    return False


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
    ("scaling.md", "how the test suite runs two processes"): lambda: _not_slow("test_chunk_map.py",
                                                                               "test_two_processes_gloo"),
}


def test_test_suite_statements_are_true():
    """A sentence saying that something runs in the test suite is checked here: the page's
    code blocks run by tests/test_docs.py without the slow mark, or the test it means is
    not marked slow. A new such sentence needs its check in SUITE_STATEMENTS (or says
    "the slow tests")."""
    unknown, false = [], []
    for page in DOCS + [README]:
        text = re.sub(r"\s+", " ", prose(page.read_text()))
        for m in SUITE_CLAIM.finditer(text):
            context = text[max(0, m.start() - 80):m.end() + 80]
            checks = [check for (name, words), check in SUITE_STATEMENTS.items()
                      if name == page.name and words in context]
            if not checks:
                unknown.append(f"{page.name}: ...{context}...")
            elif not all(check() for check in checks):
                false.append(f"{page.name}: ...{context}...")
    assert not false, "said to run in the test suite, but slow or absent:\n" + "\n".join(false)
    assert not unknown, "unchecked 'runs in the test suite' statements:\n" + "\n".join(unknown)


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
