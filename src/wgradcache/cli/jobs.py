"""``wgradcache count``: jobs per target x dtype x variant, closed form or walked."""

from __future__ import annotations

import click

from wgradcache.cli.app import json_option, main, selection_options
from wgradcache.cli.console import emit_json, table


@main.command()
@selection_options
@json_option
@click.option("--walk", "by_walk", is_flag=True,
              help="enumerate the walk instead of the closed form (the cross-check)")
@click.option("--list", "as_list", is_flag=True, help="print every walked job's label")
def count(as_json, by_walk, as_list, geometries_file, **selection) -> None:
    """Jobs per target x dtype x variant, computed without building the walk."""
    from wgradcache.jobs import count_table, default_jobdata, resolve_selection, walk

    data = default_jobdata(geometries_file)
    sel = resolve_selection(data=data, **selection)  # targets, dtypes, variants
    if as_list:
        for t in sel.targets:
            for spec in walk(t, sel.dtypes, sel.variants, data):
                click.echo(spec.label())
        return
    doc = count_table(sel, data, by_walk=by_walk)
    if as_json:
        emit_json(doc)
        return
    rows = [(t, d, v, n) for t, td in doc["targets"].items() for d, dd in td["dtypes"].items()
            for v, n in dd["variants"].items()]
    rows += [(t, "", "total", td["total"]) for t, td in doc["targets"].items()]
    table(f"jobs ({'walk' if by_walk else 'closed form'}): {doc['total']} in all",
          ("target", "dtype", "variant", "jobs"), rows, numeric_from=3)
