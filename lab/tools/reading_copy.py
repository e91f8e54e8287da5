"""``python -m lab reading-copy``: the executed lessons as accessible HTML pages, one per lesson (WCAG 2.1 AA).

nbconvert's lab template with what it lacks for AA: its prompts (#b0b0b0 on white, 2.2:1) and a few of Pygments'
default code colours (comments, operator words, numbers: 3.4 to 4.2:1 on the code cells' #f5f5f5) fall short of
4.5:1 (1.4.3); ``CONTRAST_FIXES`` sets each to a colour that reaches it, as data the tests measure. Figures already
carry alt text and captions (``lab.plots.shown``) and tables their headers (``lab.tables``). Axe-core in Chromium
checks the pages: ``tests/test_accessibility_export.py``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

CODE_BACKGROUND = "#f5f5f5"  # the lab template's code cells
# CSS selector -> (colour, the background it sits on): each at 4.5:1 or better there
CONTRAST_FIXES = {
    ".jp-InputPrompt, .jp-OutputPrompt": ("#595959", "#ffffff"),
    ".highlight .c, .highlight .c1, .highlight .ch, .highlight .cm, .highlight .cp, .highlight .cpf, .highlight .cs":
        ("#3b6363", CODE_BACKGROUND),
    ".highlight .o, .highlight .ow": ("#7b1fa2", CODE_BACKGROUND),
    ".highlight .m, .highlight .mb, .highlight .mf, .highlight .mh, .highlight .mi, .highlight .mo, .highlight .il":
        ("#006400", CODE_BACKGROUND),
}


def style_block(fixes: dict[str, tuple[str, str]] = CONTRAST_FIXES) -> str:
    """A ``<style>`` element setting each selector's colour, fully opaque (the prompts are drawn half transparent)."""
    rules = "\n".join(f"{selector} {{ color: {color} !important; opacity: 1 !important; }}"
                      for selector, (color, _) in fixes.items())
    return f'<style id="lab-reading-copy">\n{rules}\n</style>'


def to_html(notebook: Path) -> str:
    """One executed lesson as an accessible HTML page."""
    import nbformat  # deferred: only the export needs nbconvert and its templates
    from nbconvert import HTMLExporter  # deferred: as above

    html, _ = HTMLExporter(template_name="lab").from_notebook_node(nbformat.read(notebook, as_version=4))
    return html.replace("</head>", style_block() + "\n</head>", 1)


def export(notebooks: list[Path], out_dir: Path) -> list[Path]:
    """Write ``out_dir/<lesson>.html`` for each notebook; returns the pages."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pages = []
    for nb in notebooks:
        page = out_dir / f"{nb.stem}.html"
        page.write_text(to_html(nb), encoding="utf-8")
        pages.append(page)
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab reading-copy", description=__doc__.splitlines()[0])
    parser.add_argument("executed", help="folder of executed lessons (what `python -m lab run` writes)")
    parser.add_argument("--out", default="reading-copy", help="folder for the HTML pages (default: reading-copy)")
    args = parser.parse_args(argv)
    notebooks = sorted(Path(args.executed).glob("[0-9][0-9]_*.ipynb"))
    if not notebooks:
        print(f"reading-copy: no executed lessons (NN_*.ipynb) in {args.executed}; run `python -m lab run` first",
              file=sys.stderr)
        return 2
    for page in export(notebooks, Path(args.out)):
        print(f"wrote {page}")
    return 0
