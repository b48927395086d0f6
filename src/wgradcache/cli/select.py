"""``wgradcache select``: the kernels that serve a problem, best first (ten unless asked)."""

from __future__ import annotations

import click

from wgradcache.cli.app import cache_dir_option, geometries_option, main
from wgradcache.cli.console import RunFailed, UserError, emit_json, printable, table
from wgradcache.cli.params import DtypeParam, IntParam, ProblemParam, TargetParam

SHOWN_BY_DEFAULT = 10


@main.command(name="select")
@click.option("--target", required=True, type=TargetParam(), help="the GPU to serve, e.g. gfx1250")
@click.option("--problem", required=True, metavar="P", type=ProblemParam(),
              help="N,C,H,W,K,Y,X[,stride,pad,dilation,groups]")
@click.option("--dtype", default="fp16", show_default=True, type=DtypeParam(),
              help="fp16, bf16, fp16_f32 or bf16_f32")
@click.option("--from-walk", is_flag=True, help="answer from the walk instead of the cache")
@click.option("--all-widths", is_flag=True, help="keep every vector width (no pruning)")
@click.option("--limit", type=IntParam(1, 10**9), default=None,
              help=f"show the best N (default: {SHOWN_BY_DEFAULT} in the table, all in --json)")
@click.option("--all", "show_all", is_flag=True, help="show every kernel that serves")
@click.option("--device-class", default=None, metavar="C",
              help="rank by this device class's timings (default: the cache's only class; "
                   "a device's graph-timed class before its host-timed one)")
@geometries_option
@cache_dir_option
@click.option("--json", "as_json", is_flag=True,
              help="{candidates (in rank order; each with cost_from: measured, fitted, code "
                   "object or formula, expected_ms, and degree_from: policy or measured), "
                   "served, skipped_corrupt, skipped}")
def select_(limit, show_all, as_json, **options) -> None:
    """The cached kernels that serve a problem, ranked, with split degree and launch shape.

    Exit 0 when a kernel serves, 1 when none does, 2 for bad input. Entries that cannot
    be served (not whole, a blob that is not its bytes, or a two-stage entry whose stage-2
    kernel is missing or not its bytes) are skipped and said so: one
    line on stderr with how many and an example, and in --json ("skipped").
    """
    from wgradcache.pipeline.select import DeviceClassError, SelectRequest, serve

    req = SelectRequest(**{**options, "cache_dir": str(options["cache_dir"])})
    try:
        served = serve(req)
    except DeviceClassError as e:
        raise UserError(str(e)) from None
    found = served.candidates
    if served.skipped:
        click.echo(printable(served.skipped_line()), err=True)
    if show_all:
        limit = None
    elif limit is None and not as_json:
        limit = SHOWN_BY_DEFAULT
    shown = found[:limit] if limit else found
    where = "walk" if req.from_walk else req.cache_dir
    text = req.problem.short()
    if as_json:
        emit_json({"candidates": [c.to_json() for c in shown], "served": len(found),
                   "skipped_corrupt": len(served.skipped), "skipped": served.skipped})
    else:
        more = (f"; the best {len(shown)} shown (--all for every one)"
                if len(shown) < len(found) else "")
        table(f"{len(found)} kernel(s) serve {text} on {req.target} ({req.dtype}, {where})"
              + more, ("#", "label", "split", "grid", "block", "LDS", "workspace"),
              [(i + 1, c.spec.label(), c.degree, "x".join(map(str, c.grid)), c.block,
                c.lds_bytes, c.workspace_bytes) for i, c in enumerate(shown)], numeric_from=2)
    if not found:
        if not as_json:
            click.echo("no kernel serves this problem", err=True)
        raise RunFailed(f"no cached kernel serves {text} on {req.target}")
