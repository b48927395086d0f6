"""``wgradcache cover``: the geometry cover recomputed from measured timings."""

from __future__ import annotations

import click

from wgradcache.cli.app import TargetParam, cache_dir_option, geometries_option, json_option, main
from wgradcache.cli.console import UserError, emit_json, printable
from wgradcache.cli.params import FloatParam, IntParam, PathParam


def _max_cover() -> int:
    from wgradcache.jobs.cover import MAX_COVER

    return MAX_COVER


def _max_factor() -> float:
    from wgradcache.jobs.cover import MAX_FACTOR

    return MAX_FACTOR


@main.command(name="cover")
@click.option("--timings", "timings_file", default=None, type=PathParam("file"),
              metavar="FILE", help="the JSON benchmarks/device_speed.py writes (--out)")
@click.option("--from-cache", is_flag=True,
              help="the cache's own timings (tune, tune --import) of --target instead")
@click.option("--target", default=None, type=TargetParam(),
              help="with --from-cache: whose timings")
@click.option("--device-class", default=None, metavar="C",
              help="with --from-cache: whose timings (default: the cache's only class; "
                   "a device's graph-timed class before its host-timed one)")
@cache_dir_option
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
def cover(timings_file, from_cache, out_file, as_json, **options) -> None:
    """Recompute the geometry cover from measured per-layer timings (greedy set cover).

    The timings: a file (--timings FILE), or the cache's own (--from-cache --target T),
    whose pairs are (problem, dtype) and whose rows of a rebuilt kernel are left out as
    stale. Per pair: the best time at each measured geometry; each step takes the
    geometry that keeps the most uncovered pairs within --factor of their best over every
    measured geometry (ties: the lower time), until all are covered or --size is reached.
    Prints the cover with its reason per entry and what the layer set loses against the
    full ladder, and the current cover of the geometries file measured on the same
    timings; --out writes the cover block to paste in place of geometries.yaml's.
    Exit 0 with a report, 2 for bad input.
    """
    from wgradcache.jobs.cover import cover_block, cover_from_file, summary_lines, write_block
    from wgradcache.jobs.timings import TimingsError

    target, device_class = options["target"], options["device_class"]
    if (timings_file is None) == (not from_cache) or (from_cache and target is None):
        raise UserError("cover: give --timings FILE, or --from-cache --target T")
    if not from_cache and (target or device_class):
        raise UserError("cover: --target and --device-class go with --from-cache")
    source, extra, note = timings_file, {}, ""
    try:
        if from_cache:
            got = _from_cache(options)
            result, source, note = got.result, got.source(), got.note()
            extra = {"device_class": got.device_class, "rows": got.rows,
                     "rows_left_out": got.left_out}
        else:
            result = cover_from_file(timings_file, options["size"], options["factor"],
                                     options["geometries_file"], options["dtypes"])
        if out_file is not None:
            write_block(result, out_file)
    except TimingsError as e:
        raise UserError(str(e)) from None
    if as_json:
        emit_json({**result.to_json(), **extra, "block": cover_block(result), "out": out_file})
        return
    for line in summary_lines(result, source) + ([note] if note else []):
        click.echo(printable(line))
    if out_file is not None:
        click.echo(printable(f"wrote the cover block ({len(result.picks)} entries) to "
                             f"{out_file}"))


def _from_cache(o: dict):
    """``pipeline.cover.cover_from_cache`` of the command's options, its refusals as one
    line."""
    from wgradcache.cache.entry import CorruptEntry
    from wgradcache.pipeline.cover import CoverFromCache, cover_from_cache
    from wgradcache.pipeline.select import DeviceClassError

    try:
        return cover_from_cache(CoverFromCache(
            o["target"], str(o["cache_dir"]), o["device_class"], o["size"], o["factor"],
            o["geometries_file"], tuple(o["dtypes"])))
    except (DeviceClassError, CorruptEntry) as e:
        raise UserError(str(e)) from None
