"""Every statement of the README and docs/*.md that something is tested names a test that
does it, the README's results table is generated, and no page refers to internal history.

(Every figure of the pages is tied to its source: tests/test_figures.py.)

Rules (a mismatch names the file, the line and the sentence):

- **Pages**: README.md and every docs/*.md; docs/research_log.md is historical: it says so
  at its top and each of its entries is dated (checked below), and its tested statements
  are not checked.
- **Tested statements**: a sentence saying that something is tested, is checked by the tests
  or runs in the test suite names an existing test file (``tests/test_x.py``) or is in
  ``SUITE_STATEMENTS`` with the tests it means; one that says the default run (the test
  suite runs / checks) must mean tests not marked slow, one that says "slow tests" or
  ``pytest -m slow`` tests marked slow. Every entry of ``SUITE_STATEMENTS`` is a sentence of
  its page (the list holds no statement that is gone).
- **The README's results table** (and the same block in docs/benchmarks.md) is what
  ``benchmarks/readme_table.py`` prints from the JSONs, and each row's command is the
  options ``benchmarks/accuracy.py`` runs for that row.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import pathlib
import re
import shlex
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
RESEARCH_LOG = ROOT / "docs" / "research_log.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _load(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


readme_table = _load(ROOT / "benchmarks" / "readme_table.py", "readme_table_for_claims")

# ---------------------------------------------------------------- reading the pages
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
COMMENT = re.compile(r"<!--.*?-->", re.S)


def _blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def _sentence(text: str, start: int, end: int) -> str:
    left = max(text.rfind(". ", 0, start), text.rfind("\n\n", 0, start), text.rfind("|", 0, start),
               text.rfind(": ", 0, start), text.rfind("; ", 0, start))
    rights = [i for i in (text.find(". ", end), text.find("\n\n", end), text.find("|", end)) if i >= 0]
    return re.sub(r"\s+", " ", text[left + 1:min(rights) if rights else len(text)]).strip()


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


def test_suite_statements_are_on_their_pages():
    """Every entry of SUITE_STATEMENTS is a tested statement of its page: an entry whose
    sentence is gone (and whose check would then run for nothing) fails."""
    found = {(page.name, sentence) for page in DOCS + [README] if page != RESEARCH_LOG
             for _, _, sentence in _statements(page)}
    stale = [(name, words) for name, words in SUITE_STATEMENTS
             if not any(n == name and re.sub(r"\s+", " ", words) in s for n, s in found)]
    assert not stale, f"SUITE_STATEMENTS entries that no page states any more (remove them): {stale}"
