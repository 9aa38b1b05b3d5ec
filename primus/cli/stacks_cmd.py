"""`primus stacks list` and `primus stacks show NAME[@RELEASE]`."""

from __future__ import annotations

import json

import click

from primus.cli.common import format_option, guarded
from primus.cli.output import echo, emit_json, stdout_console, table
from primus.stacks.core import catalog_stacks, load_stack_file, resolve_stack


@click.group("stacks")
def stacks_group() -> None:
    """Frameworks and their releases: what each does for the settings a job file leaves out.

    Example: primus stacks show megatron-bridge@26.04
    """


@stacks_group.command("list")
@format_option("table", "json")
@guarded
def stacks_list(fmt: str) -> None:
    """The shipped stacks, their releases (oldest first) and where they come from.

    Example: primus stacks list --format json
    """
    docs = []
    for name in catalog_stacks():
        spec = load_stack_file(name)
        docs.append({"name": name, "title": spec.title, "releases": [r.release for r in spec.releases],
                     "source": spec.homepage})
    if fmt == "json":
        emit_json(docs)
        return
    # the console reads no markup (SafeConsole): titles and cells print as written
    stdout_console().print(table("Stacks (job key `stack: NAME[@RELEASE]`)", ["name", "releases", "title", "source"],
                                 [(d["name"], ", ".join(d["releases"]), d["title"], d["source"]) for d in docs]))


@stacks_group.command("show")
@click.argument("ref", metavar="NAME[@RELEASE]")
@format_option("table", "json")
@guarded
def stacks_show(ref: str, fmt: str) -> None:
    """Every setting of one release of a stack, with its source (a bare name: the newest release; an
    unknown release: the newest release not after it, said on stderr).

    Example: primus stacks show torchtitan@2024.12
    """
    stack = resolve_stack(ref, "command line", "NAME[@RELEASE]")
    if fmt == "json":
        emit_json(stack.to_json())
        return
    if stack.note:
        echo(f"primus: note: {stack.note}", err=True)  # one line, however wide the terminal
    con = stdout_console()
    rows = [(k, json.dumps(v), stack.sources[k]) for k, v in stack.values.items()]
    con.print(table(f"{stack.label}: {stack.title}", ["setting", "value", "source"], rows))
    con.print(f"release source: {stack.release_source}")
    if stack.recipes:
        # a preset's variants differ by their layout (Stack.recipe_for), so it is shown beside the releases
        con.print(table("per-model recipes", ["model", "gpu", "precision", "since", "until", "layout", "settings",
                                              "source"],
                        [(r.model, r.gpu, r.precision, r.since or "-", r.until or "-",
                          json.dumps(r.layout.model_dump(exclude_none=True)) if r.layout else "-",
                          json.dumps(r.settings.model_dump(exclude_none=True)), r.source) for r in stack.recipes]))
    if stack.pipeline_layouts:
        con.print(table("per-model pipeline layouts (pipeline.layout where a job pins PP and VP)",
                        ["model", "pp", "vp", "since", "until", "layout", "source"],
                        [(r.model, str(r.pp), str(r.vp), r.since or "-", r.until or "-",
                          r.layout + (" (the m: the model's MTP layers)" if r.mtp_from_model else ""), r.source)
                         for r in stack.pipeline_layouts]))
