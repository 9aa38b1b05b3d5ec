"""docs/stacks.md's tables, written from `stacks/*.yaml` so the page cannot drift from the data.

`python -m primus.stacks.doc` rewrites the part of docs/stacks.md between the markers; the test suite
checks the page holds exactly what this renders.
"""

from __future__ import annotations

import sys
from pathlib import Path

from primus.report.markdown import md_code, md_text
from primus.stacks.allocator import allocators
from primus.stacks.core import catalog_stacks, load_stack_file

START = "<!-- stacks:generated:start -->"
END = "<!-- stacks:generated:end -->"


def _cell(text: object) -> str:
    """Markdown-safe inline text (tables included): `*`, `_`, `|`, backticks and the rest escaped, so a
    source such as `configs/*/*_workload.yaml` renders as written."""
    return md_text(text)


def render() -> str:
    """Every stack: its releases, then every setting of every release with its value and source."""
    lines = [START, ""]
    for name in catalog_stacks():
        spec = load_stack_file(name)
        lines += [f"### `{name}`: {_cell(spec.title)}", "", f"Home: {_cell(spec.homepage)}. Releases (oldest first): "
                  + ", ".join(md_code(r.release) for r in spec.releases) + ".", ""]
        if spec.validate_sources:
            lines += ["`validate` reads the published runs whose source starts with "
                      + ", ".join(md_code(k) + (f" (as {md_code(f'{name}@{v}')})" if v else "") for k, v in
                                  spec.validate_sources.items()) + " on this stack.", ""]
        if spec.validate_flags:
            lines += ["`validate` reads the published runs flagged "
                      + ", ".join(md_code(k) + (f" (as {md_code(f'{name}@{v}')})" if v else "") for k, v in
                                  spec.validate_flags.items()) + " on this stack, whatever their source.", ""]
        for rel in spec.releases:
            lines += [f"**{md_code(f'{name}@{rel.release}')}** — {_cell(rel.source)}", ""]
            given = rel.settings.given()
            if not given:
                lines += ["No setting changes.", ""]
                continue
            lines += ["| setting | value | source |", "|---|---|---|"]
            for key, setting in given.items():
                lines.append(f"| {md_code(key)} | {md_code(setting.value)} | {_cell(setting.source)} |")
            lines.append("")
        for r in spec.recipes:
            span = (f" (releases {r.since or '…'} to {r.until or '…'})" if r.until
                    else f" (releases {r.since} on)" if r.since else "")
            at = (" at " + ", ".join(f"{k} {v}" for k, v in r.layout.model_dump(exclude_none=True).items())
                  if r.layout else "")
            lines.append(f"- recipe {_cell(f'{r.model} / {r.gpu} / {r.precision}{span}{at}')}: "
                         f"{md_code(r.settings.model_dump(exclude_none=True, mode='json'))} — {_cell(r.source)}")
        if spec.recipes:
            lines.append("")
        if spec.pipeline_layouts:
            lines += ["Pipeline layouts the model recipes name (`pipeline_layouts`):", "",
                      "| model | PP | VP | releases | layout | source |", "|---|---:|---:|---|---|---|"]
        for lay in spec.pipeline_layouts:
            span = (f"{lay.since or '…'} to {lay.until or '…'}" if lay.until
                    else f"{lay.since} on" if lay.since else "all")
            mtp = " (the m: the model's MTP layers)" if lay.mtp_from_model else ""
            lines.append(f"| {_cell(lay.model)} | {lay.pp} | {lay.vp} | {_cell(span)} | {md_code(lay.layout)}{mtp} | "
                         f"{_cell(lay.source)} |")
        if spec.pipeline_layouts:
            lines.append("")
    a = allocators()
    lines += ["### Allocator reserves (`stacks/allocators.yaml`)", "", "| allocator | reserve (share of HBM "
              "after the runtime context) | derivation |", "|---|---:|---|",
              f"| `default` | {a.default.reserve_fraction:.2f} | {_cell(a.default.source)} |",
              f"| `expandable_segments` | {a.expandable_segments.reserve_fraction:.2f} | "
              f"{_cell(a.expandable_segments.source)} |", "", END]
    return "\n".join(lines)


def generated_section(text: str) -> str:
    """The part of a page between the markers (inclusive); '' when absent."""
    if START not in text or END not in text:
        return ""
    return text[text.index(START):text.index(END) + len(END)]


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/stacks.md")
    text = path.read_text(encoding="utf-8")
    old = generated_section(text)
    if not old:
        raise SystemExit(f"{path}: no {START} ... {END} markers")
    path.write_text(text.replace(old, render()), encoding="utf-8")


if __name__ == "__main__":
    main()
