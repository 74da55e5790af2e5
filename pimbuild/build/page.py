"""``report.html``: one self-contained page per run (and, from ``pimbuild.commands.sweep``,
per sweep) to open offline in a browser: the summary the console printed, the simulate
stage's report with its plots inline, where the timeline is, every artifact's key and
files, the composed config and the tool versions. Markdown is rendered by ``markdown``, the
console's lines and tables by rich's HTML export; nothing is fetched when it is opened.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

STYLE = """body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;
color:#222}h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.2rem .5rem;
text-align:left;font-size:.9rem}pre{background:#f6f6f6;padding:.5rem;overflow:auto;white-space:pre-wrap;
font-size:.85rem}img{max-width:100%;margin:.5rem 0}code{font-size:.9rem}"""


def console_html(lines: list[Any], width: int = 110) -> str:
    """The console's summary (markup strings and rich tables) as HTML, inline styles."""
    from rich.console import Console

    recorder = Console(record=True, width=width, file=io.StringIO())
    for line in lines:
        recorder.print(line, soft_wrap=True)
    return f"<pre>{recorder.export_html(inline_styles=True, code_format='{code}')}</pre>"


def markdown_html(text: str) -> str:
    import markdown

    return markdown.markdown(text, extensions=["tables", "fenced_code"])


def image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return (f'<figure><img alt="{html.escape(path.name)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(path.name)}</figcaption></figure>")


def table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(title: str, sections: list[tuple[str, str]]) -> str:
    """A whole page: ``sections`` are (heading, HTML)."""
    body = "".join(f'<section id="{html.escape(h.lower().replace(" ", "-"))}">'
                   f"<h2>{html.escape(h)}</h2>{content}</section>" for h, content in sections)
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>'
            f"{html.escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>{body}</body></html>\n")


def run_page(title: str, summary: list[Any], manifest: dict[str, Any], config_yaml: str,
             dirs: dict[str, Path]) -> str:
    sections = [("Summary", console_html(summary))]
    simulate = dirs.get("simulate")
    if simulate is not None:
        report_md = simulate / "report.md"
        if report_md.is_file():
            sections.append(("Report", markdown_html(report_md.read_text())))
        plots = sorted(simulate.glob("*.png"))
        if plots:
            sections.append(("Plots", "".join(image(p) for p in plots)))
        if (simulate / "timeline.json").is_file():
            sections.append(("Timeline", f"<p><code>{html.escape(str(simulate))}/timeline.json"
                                         f"</code>: open it in https://ui.perfetto.dev or "
                                         f"chrome://tracing.</p>"))
    sections.append(("Artifacts", table(
        ["stage", "key", "folder", "files"],
        [[stage, a["key"], a["dir"], ", ".join(sorted(a.get("files", {})))]
         for stage, a in manifest["stages"].items()])))
    sections.append(("Config", f"<pre>{html.escape(config_yaml)}</pre>"))
    sections.append(("Versions", table(["tool", "version"],
                                       [[k, v] for k, v in manifest["versions"].items()])))
    return page(title, sections)
