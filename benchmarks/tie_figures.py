"""Check that every figure of README.md and docs/*.md is tied to its source, and propose ties.

The rules (what a figure is, how a tie reads, what is checked) are those of
``benchmarks/_figures.py``; tests/test_figures.py runs the same check.

    python benchmarks/tie_figures.py                        # every page: what fails
    python benchmarks/tie_figures.py --propose docs/x.md    # a tie for each paragraph with untied figures
    python benchmarks/tie_figures.py --propose docs/x.md --write   # insert the unambiguous ones

A proposal looks up, for each untied figure, the values of ``benchmarks/results/*.json``
that round to it as written (through the unit rules); where several do, it prefers a file
the paragraph (else its section, else the page) names, and the list element that holds the
paragraph's other figures. A figure with no single best source is listed with its
candidates, for a person to decide from the sentence; ``--write`` then inserts only the
ties of paragraphs whose every figure was decided, each on the line after its paragraph.
"""
from __future__ import annotations

import argparse
import collections
import json
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _figures as F  # noqa: E402

ID_FIELDS = ("system", "name", "row", "variant", "topology", "form", "group", "label", "run", "tuning")


def leaves(node, path=""):
    """``(path, value)`` of every number of a JSON document; list elements named by an
    identifying field where one tells them apart (``rows[system=x]``), else by index."""
    if isinstance(node, dict):
        for k, v in node.items():
            step = f".{k}" if re.fullmatch(r"[A-Za-z_][\w-]*", str(k)) else f"[{json.dumps(k)}]"
            yield from leaves(v, (path + step).lstrip("."))
    elif isinstance(node, list):
        field = next((f for f in ID_FIELDS if all(isinstance(x, dict) and isinstance(x.get(f), str) for x in node)
                      and len({x[f] for x in node}) == len(node)), None)
        for i, v in enumerate(node):
            yield from leaves(v, f"{path}[{field}={v[field]}]" if field else f"{path}[{i}]")
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield path, float(node)


_INDEX = None


def index():
    """``(file, path, value, unit of its key)`` of every number of every result file."""
    global _INDEX
    if _INDEX is None:
        _INDEX = []
        for p in sorted(F.RESULTS.glob("*.json")):
            for path, x in leaves(json.loads(p.read_text())):
                key = (re.findall(r"[A-Za-z_][\w-]*", path) or [""])[-1].lower()
                _INDEX.append((p.name, path, x, next((u for pattern, u in F.KEY_UNITS if re.search(pattern, key)), "")))
    return _INDEX


def candidates(n: F.Number):
    """``(file, path, unit)`` of each JSON value that rounds to figure ``n`` (unit: the one an
    unitless figure must be given for it to match, else "")."""
    out = []
    for implied in [""] + ([] if n.unit else ["ms", "s", "min", "MiB", "%"]):
        unit = n.unit or implied
        for file, path, x, key_unit in index():
            if implied and not key_unit:
                continue
            try:
                value = F.convert(x, key_unit, unit, "")
            except F.TieError:
                continue
            if F.as_written(value, n.text) == n.text:
                out.append((file, path, implied))
    return out


def element(path: str) -> str:
    """The path up to its last list selector (``parts.w1.rows[0]`` of ``parts.w1.rows[0].step_s``)."""
    i = path.rfind("]")
    return path[:i + 1] if i >= 0 else ""


def propose(page: pathlib.Path):
    """``(segment, tie text or None, [(number, candidates)] undecided)`` for each paragraph
    of ``page`` with untied figures."""
    text = page.read_text()
    clean = F.prose(text)
    _, found = F.check(page, text, run_generated=False)
    untied = [n for n in found if n.figure and not n.tied and not F.estimate(clean, n)]
    headings = [m.start() for m in re.finditer(r"^#", text, re.M)]
    for seg in F.segments(text):
        mine = [n for n in untied if seg.start <= n.start <= seg.end]
        if not mine or seg.kind != "para":
            continue
        section_start = max([h for h in headings if h <= seg.start], default=0)
        section_end = min([h for h in headings if h > seg.start], default=len(text))
        named = lambda file, a, b: file in text[a:b]  # noqa: E731
        options = {id(n): candidates(n) for n in mine}
        elements = collections.Counter((f, element(p)) for n in mine for f, p, _ in set(options[id(n)]))
        chosen, undecided = [], []
        for n in mine:
            scored = sorted(((3 * named(f, seg.start, seg.end) - (u != "") + 2 * named(f, section_start, section_end)
                              + named(f, 0, len(text)) + 0.5 * elements[(f, element(p))], f, p, u)
                             for f, p, u in options[id(n)]), reverse=True)
            if scored and (len(scored) == 1 or scored[0][0] > scored[1][0]):
                chosen.append((n, *scored[0][1:]))
            else:
                undecided.append((n, [(f, p, u) for _, f, p, u in scored[:6]]))
        yield seg, tie_text(chosen) if chosen else None, undecided


def tie_text(chosen) -> str:
    """The tie of ``[(number, file, path, implied unit)]``, items grouped under shared bases."""
    parts, base = [], None
    for n, file, path, unit in sorted(chosen, key=lambda c: c[0].start):
        elem = element(path)
        rest = path[len(elem):].lstrip(".") if elem else path
        head = f"{file} {elem}".strip() if elem else file
        unit = n.unit or unit
        item = f"{n.text.lstrip('-')}{' ' + unit if unit else ''} = {rest}"
        parts.append(item if head == base else f"{head}: {item}")
        base = head
    out, line = [], "<!-- figures:"
    for k, part in enumerate(parts):
        piece = " " + part + (";" if k < len(parts) - 1 else " -->")
        if len(line) + len(piece) > 100 and line != "<!-- figures:":
            out.append(line)
            line = piece.lstrip()
        else:
            line += piece
    return "\n".join(out + [line])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--propose", nargs="+", metavar="PAGE", help="propose ties for these pages")
    parser.add_argument("--write", action="store_true", help="insert the ties of fully decided paragraphs")
    args = parser.parse_args(argv)
    if not args.propose:
        problems = [p for page in F.PAGES for p in F.check(page)[0]]
        print("\n".join(p.message for p in problems) or "every figure is tied to its source")
        return 1 if problems else 0
    for name in args.propose:
        page = pathlib.Path(name).resolve()
        before = page.read_text()
        inserts = []
        for seg, tie, undecided in propose(page):
            print(f"\n{page.name}:{before.count(chr(10), 0, seg.start) + 1}: {before[seg.start:seg.end][:100]!r}...")
            if tie:
                print("  " + tie)
            for n, options in undecided:
                print(f"  undecided {n.text} {n.unit}: " + ("; ".join(f"{f} {p}{' (' + u + ')' if u else ''}"
                                                                   for f, p, u in options) or "no JSON value"))
            if tie and not undecided:
                inserts.append((seg.end, "\n" + tie))
        if args.write and inserts:
            if page.read_text() != before:
                print(f"{page}: changed while proposing; run again", file=sys.stderr)
                return 1
            text = before
            for pos, tie in sorted(inserts, reverse=True):
                text = text[:pos] + tie + text[pos:]
            page.write_text(text)
            print(f"\n{page.name}: {len(inserts)} ties inserted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
