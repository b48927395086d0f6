"""The command line: click commands only, each a parse, one library call and one render.

Heavy imports live inside the commands so ``wgradcache count`` starts fast.
"""

from __future__ import annotations

import os
import sys

import click

from .console import RunFailed, UserError, debug, emit_json, table

CACHE_DIR_HELP = "cache root (default: $WGRADCACHE_DIR or ./cache)"


def _default_cache_dir() -> str:
    return os.environ.get("WGRADCACHE_DIR", "cache")


class _Group(click.Group):
    """Turns library errors about user input into one-line exit-2 errors."""

    def invoke(self, ctx: click.Context):
        from .jobs import GeometryFileError, SelectionError

        try:
            return super().invoke(ctx)
        except (GeometryFileError, SelectionError) as e:
            if debug():
                raise
            raise UserError(str(e)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="wgradcache")
def main() -> None:
    """Build, verify and serve an ahead-of-time cache of AMD GPU wgrad code objects.

    Start with `wgradcache count` (how many jobs the walk yields per target), then
    `wgradcache build --target gfx1250` and `wgradcache verify --from-cache`.
    """


def _geometries_option(f):
    return click.option("--geometries", "geometries", type=click.Path(dir_okay=False),
                        default=None, envvar="WGRADCACHE_GEOMETRIES",
                        help="job data file (default: the repository's geometries.yaml)")(f)


def _selection_options(f):
    f = click.option("--variant", "variants", multiple=True, metavar="V",
                     help="k_loop.epilogue.reduction, e.g. async.cshuffle.atomic (repeatable)")(f)
    f = click.option("--dtype", "dtypes", multiple=True, metavar="D",
                     help="fp16, bf16, fp16_f32 or bf16_f32 (repeatable; default fp16, bf16)")(f)
    f = click.option("--target", "targets", multiple=True, metavar="T",
                     help="gfx1250, gfx1201, gfx1151, gfx950, gfx942 (repeatable; "
                          "default: every target with kernels)")(f)
    return _geometries_option(f)


@main.command()
@_selection_options
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option("--walk", "by_walk", is_flag=True,
              help="enumerate the walk instead of the closed form (the cross-check)")
@click.option("--list", "as_list", is_flag=True, help="print every walked job's label")
def count(targets, dtypes, variants, geometries, as_json, by_walk, as_list) -> None:
    """Jobs per target x dtype x variant, computed without building the walk."""
    from .jobs import count_table, default_jobdata, resolve_selection, walk

    data = default_jobdata(geometries)
    sel = resolve_selection(targets, dtypes, variants, data)
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


def run() -> None:  # pragma: no cover - console-script shim
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)


__all__ = ["main", "RunFailed"]
