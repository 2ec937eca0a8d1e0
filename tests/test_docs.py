"""The code blocks of docs/*.md and README.md run as written."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
PAGES = [p for p in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"] if BLOCK.search(p.read_text())]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_code_blocks_run(page, tmp_path, monkeypatch):
    blocks = BLOCK.findall(page.read_text())
    monkeypatch.chdir(tmp_path)  # files a page writes land in a temporary folder
    namespace = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)
        except Exception as err:  # name the block that failed
            raise AssertionError(f"{page.name}, python block {i} failed: {err!r}\n{code}") from err
