"""Every figure of README.md and docs/*.md is tied to its source, and a wrong digit fails.

The rules (what a figure is, how a tie reads, how a tied figure is checked, the few
exemptions) are those of ``benchmarks/_figures.py``; docs/benchmarks.md says how to quote a
new figure; ``python benchmarks/tie_figures.py --propose PAGE`` proposes ties.
"""
from __future__ import annotations

import importlib.util
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _load(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


F = _load(ROOT / "benchmarks" / "_figures.py", "figures_for_tests")


def problems(text: str, name: str = "benchmarks.md") -> list[str]:
    """The problems of ``text`` read as page ``name`` (generated blocks checked too)."""
    return [p.message for p in F.check(ROOT / "docs" / name, text)[0]]


@pytest.mark.parametrize("page", F.PAGES, ids=lambda p: p.name)
def test_every_figure_is_tied_to_its_source(page):
    """(a) a tied figure is its source rounded as written, (b) every tie names a file and key
    that exist, (c) every figure is tied, generated or marked as an estimate."""
    found = [p.message for p in F.check(page)[0]]
    assert not found, (f"{page.relative_to(ROOT)}: figures not tied to their source (the convention: "
                       "docs/benchmarks.md, 'Quoting a figure'; proposals: python benchmarks/tie_figures.py "
                       f"--propose {page.relative_to(ROOT)}):\n" + "\n".join(found))


def test_the_pages_hold_ties():
    """The check reads the pages it should: every page but the research log, and the ties
    and generated blocks in them (a finder that found nothing would pass everything)."""
    assert {p.name for p in F.PAGES} == {"README.md"} | {p.name for p in (ROOT / "docs").glob("*.md")} - {
        "research_log.md"}
    tied = {p.name: sum(n.tied for n in F.check(p)[1]) for p in F.PAGES}
    assert tied["benchmarks.md"] > 200 and tied["scaling.md"] > 80 and tied["README.md"] > 15, tied
    kinds = {s.kind for p in F.PAGES for s in F.segments(p.read_text())}
    assert kinds == {"para", "table", "generated"}


# ---------------------------------------------------------------- teeth: one digit changed
BENCH = (ROOT / "docs" / "benchmarks.md").read_text()


@pytest.mark.parametrize("page,context,figure,wrong", [
    ("docs/scaling.md", "| 3.9 ms (sampling 1.7,", "3.9", "3.8"),  # a table row's own tie
    ("docs/scaling.md", "1.6e-5 and 1.8e-6, the CPU", "1.8e-6", "1.7e-6"),  # the stale digit this check found
    ("docs/benchmarks.md", "relative error **2.83e-3 ±", "2.83e-3", "2.93e-3"),  # prose
    ("docs/benchmarks.md", "| 2424 | 1 | 98 | 96 |", "98", "99"),  # a table tied by its columns
    ("docs/benchmarks.md", "| 1.06e-3 | —", "1.06e-3", "1.07e-3"),  # a table row's tie
    ("docs/physics.md", "| −0.58333333 |", "0.58333333", "0.58333334"),  # a value of the code
    ("README.md", "took 3.9 ms", "3.9", "4.0"),
])
def test_a_changed_digit_fails(page, context, figure, wrong):
    """One digit of a tied figure changed in a copy of its page fails, naming the line."""
    path = ROOT / page
    text = path.read_text()
    assert text.count(context) == 1, context
    edited = text.replace(context, context.replace(figure, wrong, 1))
    line = text[:text.index(context)].count("\n") + 1
    found = [p.message for p in F.check(path, edited)[0]]
    assert any(m.startswith(f"{path.name}:{line}:") and wrong in m for m in found), found
    assert not F.check(path, text)[0]


def test_a_figure_and_its_tie_changed_together_fail():
    """Editing the page's figure and its tie alike still fails: the source decides."""
    text = BENCH.replace("relative error **2.83e-3 ±", "relative error **2.93e-3 ±", 1)
    text = text.replace("2.83e-3 = relative_error;", "2.93e-3 = relative_error;", 1)
    assert any("the page says 2.93e-3, relative_error is 2.83e-3" in m for m in problems(text)), problems(text)


def test_a_generated_block_edited_by_hand_fails():
    text = BENCH.replace("| lax | 2 | 16 | 12 (12) / 0 | 0 / 0 | 45.0 | 21.3 / 15.0 |",
                         "| lax | 2 | 16 | 12 (12) / 0 | 0 / 0 | 45.0 | 21.4 / 15.0 |", 1)
    assert text != BENCH
    assert any("is not what `python benchmarks/jacobian_sharding.py --markdown" in m for m in problems(text))


def test_a_tie_to_a_missing_file_or_key_fails():
    for old, new, says in [
        ("accuracy_chip.json [system=j1j2_6x6_chip]: 3e-4", "accuracy_chipp.json [system=j1j2_6x6_chip]: 3e-4",
         "no file benchmarks/results/accuracy_chipp.json"),
        ("2.83e-3 = relative_error;", "2.83e-3 = relative_eror;", "no 'relative_eror'"),
        ("[system=heisenberg_triangular6x6_chip]: 3e-4", "[system=heisenberg_triangle_chip]: 3e-4",
         "matches 0 elements"),
        ("lattice.py: 1e-8 = _RTOL", "lattice.py: 1e-8 = _ATOL", "no '_ATOL'"),
    ]:
        text = (BENCH if old in BENCH else (ROOT / "docs" / "physics.md").read_text())
        name = "benchmarks.md" if old in BENCH else "physics.md"
        assert old in text, old
        found = problems(text.replace(old, new, 1), name)
        assert any(says in m for m in found), (says, found)


def test_an_untied_figure_fails():
    for sentence in ["The W1 step took 12.5 ms.", "It reached 3.1e-4 there.", "The energy was −0.4962 per site.",
                     "Its error bar was 0.025.", "That took 15% longer."]:
        found = problems(BENCH + "\n" + sentence + "\n")
        assert len(found) == 1 and "is tied to no source" in found[0], (sentence, found)
    assert problems(BENCH + "\nIt took 12.5 ms (estimate).\n") == []  # marked as an estimate
    assert problems(BENCH + "\nThe 8 sites, 4x4, 1024 samples, J2 = 0.5, jax 0.10.2.\n") == []  # not figures


def test_a_tie_that_finds_no_figure_fails():
    """A stale tie (its figure edited away) fails, even where the new figure is tied otherwise."""
    text = BENCH + "\nThe step took 98 ms.\n<!-- figures: vmc_step.json rows[0]: 97 ms = step_s -->\n"
    assert any("finds no 97 in its paragraph" in m for m in problems(text))


# ---------------------------------------------------------------- the rules
def test_what_is_a_figure():
    text = ("It took 16.9 min and 98 ms; error 3.6e-06 ± 2.5e-6, 12% (`--diag-shift 1e-3`), "
            "v5e chip, 4x4, 600 steps, spin-1/2, 1.43x faster, 16× the images, 0.025, 1.0, J2 = 0.5, "
            "Python ≥ 3.11, jax 0.10.2, 7.4 chip-minutes, 2.2e-3.\n\n"
            "| lattice | step, min (ms) | parameters | J2 |\n| --- | --- | --- | --- |\n| 4×4 | 98 | 2424 | 0.5 |\n")
    figures = [(n.text, n.unit) for n in F.check(ROOT / "docs" / "x.md", text)[1] if n.figure]
    assert sorted(figures) == sorted([("16.9", "min"), ("98", "ms"), ("3.6e-6", ""), ("2.5e-6", ""), ("12", "%"),
                                      ("1.43", "x"), ("0.025", ""), ("7.4", "min"), ("2.2e-3", ""), ("98", "ms"),
                                      ("2424", "")]), figures
    numbers = [n.text for n in F.check(ROOT / "docs" / "x.md", "it took 16.9 min, 2026-12-06\n")[1]]
    assert numbers == ["16.9", "2026"]  # whole tokens: never "6.9", and "12-06" is no number


@pytest.mark.parametrize("value,text,same", [
    (2.83e-3, "2.83e-3", True), (2.83e-3, "2.93e-3", False), (5.1e-6, "5.2e-6", False), (3.9, "4.0", False),
    (3.9, "3.9", True), (0.0323, "0.0323", True), (98.4, "98", True), (-0.4962754, "-0.496275", True),
    (-0.4962754, "0.496275", True), (0.4962754, "-0.496275", False), (1e-5, "1e-5", True), (12870, "12870", True),
])
def test_rounded_as_written(value, text, same):
    """The issue's examples: 2.83e-3 written as 2.93e-3, 5.1e-6 as 5.2e-6, 3.9 ms as 4.0 ms fail."""
    assert (F.as_written(value, text) == text) is same


def test_units_convert_only_by_the_key():
    assert F.convert(0.0039, "s", "ms", "") == pytest.approx(3.9)
    assert F.convert(16909336064, "bytes", "GiB", "") == pytest.approx(15.748, rel=1e-4)
    assert F.convert(0.2863, "", "%", "") == pytest.approx(28.63)
    assert F.convert(3.5, None, "ms", "") == 3.5  # an expression holds the figure's unit
    for key_unit, unit in [("s", ""), ("bytes", "ms"), ("GFLOP/s", "MiB")]:
        with pytest.raises(F.TieError):
            F.convert(1.0, key_unit, unit, "")
    assert F.evaluate({"a": {"step_s": 2.0, "n": 4}}, "a.step_s", "")[1] == "s"
    assert F.evaluate({"a": {"step_s": 2.0, "n": 4}}, "a.step_s / a.n", "") == (0.5, None)


def test_paths_read_lists_dicts_and_code():
    rows = {"rows": [{"system": "a", "x": 1.5}, {"system": "J1-J2 4×4", "x": 2.5}]}
    assert F.walk(rows, "rows[1].x", "") == 2.5
    assert F.walk(rows, "rows[system=j1j2 4x4].x", "") == 2.5  # a cell's text selects its row
    with pytest.raises(F.TieError, match="matches 0 elements"):
        F.walk(rows, "rows[system=b].x", "")
    references = F.load("quantax_lite/exact/references.py")
    assert F.walk(references, 'ENERGY_PER_SITE[("6x6", "j1j2", 0.5)]', "") == -0.50381
    assert F.load("benchmarks/accuracy.py")["ARCHIVE_LIMIT"] == 15 * 2**20  # arithmetic of literals


def test_page_sources_are_pages_whose_code_runs_by_default():
    """A tie to a page's python block (``docs/x.md: NAME``) is checked only if that block runs
    in the default test run (tests/test_docs.py)."""
    test_docs = _load(ROOT / "tests" / "test_docs.py", "test_docs_for_figures")
    params = next(m for m in test_docs.test_code_blocks_run.pytestmark if m.name == "parametrize").args[1]
    by_default = {pathlib.Path(p).name for p in params if not hasattr(p, "marks")} | {
        pathlib.Path(p.values[0]).name for p in params if hasattr(p, "marks") and not p.marks}
    named = {m.group(1) for page in F.PAGES for m in re.finditer(r"(docs/\w+\.md)[\s:]", "".join(
        t.group(0) for t in F.TIE.finditer(page.read_text())))}
    assert named, "no page source is used (then this test checks nothing: remove it)"
    for source in named:
        assert pathlib.Path(source).name in by_default, f"{source}: its python blocks do not run by default"


def test_quoted_sources_are_listed():
    """A figure no file holds (a citation, an external limit, a target) is tied to a quoted
    text; they stay few, and each is a sentence a reader can check."""
    quoted = [(page.name, m.group(0)) for page in F.PAGES for tie in F.TIE.finditer(page.read_text())
              for m in re.finditer(r"[\d.]+(?: \S+)? = \"[^\"]+\"", tie.group(1))]
    assert 0 < len(quoted) <= 25, quoted
    assert all(len(q.split('"')[1]) >= 8 for _, q in quoted), quoted


def test_tie_results_exist():
    """Every result file a tie names is committed (a tie to a file that is not would pass on
    this machine only)."""
    import subprocess
    tracked = set(subprocess.run(["git", "ls-files", "benchmarks/results"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.split())
    if not tracked:
        pytest.skip("not a git checkout")
    named = {m.group(1) for page in F.PAGES for tie in F.TIE.finditer(page.read_text())
             for m in re.finditer(r"([\w-]+\.json)", tie.group(1))}
    assert named and all(f"benchmarks/results/{n}" in tracked for n in named), named - {
        n.split("/")[-1] for n in tracked}


def test_the_tool_proposes_a_tie(tmp_path):
    """``benchmarks/tie_figures.py --propose`` finds the key of an untied figure, preferring the
    file its paragraph names, and its tie passes the check."""
    T = _load(ROOT / "benchmarks" / "tie_figures.py", "tie_figures_for_tests")
    page = tmp_path / "benchmarks.md"
    page.write_text("# Page\n\nThe W1 step took 98 ms, its fastest 96 ms (`vmc_step.json`).\n")
    (segment, tie, undecided), = T.propose(page)
    assert tie == "<!-- figures: vmc_step.json rows[0]: 98 ms = step_s; 96 ms = step_min_s -->", tie
    assert not undecided
    T.main(["--propose", str(page), "--write"])
    assert F.check(page)[0] == [], F.check(page)[0]
