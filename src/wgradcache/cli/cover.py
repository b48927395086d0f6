"""``wgradcache cover``: the geometry cover recomputed from measured timings."""

from __future__ import annotations

import click

from wgradcache.cli.app import geometries_option, json_option, main
from wgradcache.cli.console import UserError, emit_json, printable
from wgradcache.cli.params import FloatParam, IntParam, PathParam


def _max_cover() -> int:
    from wgradcache.jobs.cover import MAX_COVER

    return MAX_COVER


def _max_factor() -> float:
    from wgradcache.jobs.cover import MAX_FACTOR

    return MAX_FACTOR


@main.command(name="cover")
@click.option("--timings", "timings_file", required=True, type=PathParam("file"),
              metavar="FILE", help="the JSON benchmarks/device_speed.py writes (--out)")
@click.option("--size", type=IntParam(1, _max_cover), default=19, show_default=True,
              help="at most this many geometries (1 to 256)")
@click.option("--factor", type=FloatParam(1, _max_factor), default=1.2, show_default=True,
              help="every (layer, dtype) within this factor of its best measured time")
@click.option("--out", "out_file", type=PathParam("file"), default=None, metavar="PATH",
              help="write the geometries.yaml cover: block here")
@click.option("--dtype", "dtypes", multiple=True, metavar="D",
              help="only these dtypes' timings (repeatable; default: every one in the file)")
@geometries_option
@json_option
def cover(timings_file, out_file, as_json, **options) -> None:
    """Recompute the geometry cover from measured per-layer timings (greedy set cover).

    Per (layer, dtype): the best time at each measured geometry; each step takes the
    geometry that keeps the most uncovered pairs within --factor of their best over every
    measured geometry (ties: the lower time), until all are covered or --size is reached.
    Prints the cover with its reason per entry and what the layer set loses against the
    full ladder, and the current cover of the geometries file measured on the same
    timings; --out writes the cover block to paste in place of geometries.yaml's.
    Exit 0 with a report, 2 for bad input.
    """
    from wgradcache.jobs.cover import cover_block, cover_from_file, summary_lines, write_block
    from wgradcache.jobs.timings import TimingsError

    try:
        result = cover_from_file(timings_file, **options)  # size, factor, the files, dtypes
        if out_file is not None:
            write_block(result, out_file)
    except TimingsError as e:
        raise UserError(str(e)) from None
    if as_json:
        emit_json({**result.to_json(), "block": cover_block(result), "out": out_file})
        return
    for line in summary_lines(result, timings_file):
        click.echo(printable(line))
    if out_file is not None:
        click.echo(printable(f"wrote the cover block ({len(result.picks)} entries) to "
                             f"{out_file}"))
