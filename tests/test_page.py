"""``report.html``: one self-contained page per run, read back with an HTML parser: its
sections, the simulate report's tables, the plots inline, every artifact's key, the config;
nothing it needs from outside the file."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from pimbuild.build.page import page, table


class Parsed(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.sections: list[str] = []
        self.sources: list[str] = []
        self.links: list[str] = []
        self.text: list[str] = []
        self.cells: list[str] = []
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        self._in.append(tag)
        if tag == "section":
            self.sections.append(a["id"])
        if tag in ("img", "script") and "src" in a:
            self.sources.append(a["src"])
        if tag == "link" and "href" in a:
            self.links.append(a["href"])

    def handle_endtag(self, tag: str) -> None:
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in and self._in[-1] in ("td", "th"):
            self.cells.append(data.strip())


def parse(text: str) -> Parsed:
    p = Parsed()
    p.feed(text)
    p.close()
    return p


def test_a_page_escapes_what_it_shows() -> None:
    text = page("a <b> title", [("Cells", table(["x"], [["<script>alert(1)</script>"]]))])
    p = parse(text)
    assert "script" not in p.tags and "<script>alert(1)</script>" in p.cells
    assert p.sections == ["cells"] and text.startswith("<!doctype html>")


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [["model=mlp", "timeline=true"],
                                       ["system=gpus", "model=mlp", "devices=[a100,l40s]"]])
def test_a_run_writes_its_page(run_build, tmp_path: Path, overrides: list[str]) -> None:
    result = run_build(overrides)
    pages = sorted(tmp_path.glob("run*/report.html"))
    assert len(pages) == 1, pages
    p = parse(pages[0].read_text())
    assert {"summary", "report", "artifacts", "config", "versions"} <= set(p.sections)
    for stage, a in result.manifest["stages"].items():
        assert stage in p.cells and a["key"] in p.cells
    assert all(s.startswith("data:image/png;base64,") for s in p.sources)
    assert not p.links and "script" not in p.tags  # nothing fetched, nothing run
    simulate = Path(result.manifest["stages"]["simulate"]["dir"])
    assert len(p.sources) == len(list(simulate.glob("*.png")))
    assert "table" in p.tags and "speedup" in "".join(p.text).lower()
    assert ("timeline" in p.sections) == ("timeline=true" in overrides)
    assert "model:\n  name: mlp" in "".join(p.text)  # the composed config
