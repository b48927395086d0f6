"""``wgradcache build``: the options as one ``BuildRequest``, progress, the summary table,
``--json`` lines. The library (``pipeline/build``) knows nothing of terminals."""

from __future__ import annotations

import json

import click

from wgradcache.cli.app import (
    cache_dir_option,
    geometries_option,
    jobs_option,
    main,
    shard_option,
)
from wgradcache.cli.console import ProgressHook, RunFailed, UserError, printable, table
from wgradcache.cli.params import (
    DtypeParam,
    IntParam,
    SchedulerParam,
    SecondsParam,
    TargetParam,
    VariantParam,
)

MAX_LIMIT = 10**9  # --limit: more jobs than any walk yields


@main.command()
@click.option("--target", "targets", multiple=True, metavar="T", type=TargetParam(kernels=True),
              help="target (repeatable; default gfx1250)")
@click.option("--dtype", "dtypes", multiple=True, metavar="D", type=DtypeParam(),
              help="restrict to dtypes")
@click.option("--variant", "variants", multiple=True, metavar="V", type=VariantParam(),
              help="restrict to variants")
@click.option("--geometry", "geometries", multiple=True, metavar="G",
              help="restrict to a geometry, as in labels: t64x64x32-w2x2 (repeatable)")
@click.option("--limit", type=IntParam(0, MAX_LIMIT), default=None,
              help="the first N jobs of the walk (before --shard splits them)")
@jobs_option
@click.option("--job-timeout", type=SecondsParam(), default=300.0, show_default=True,
              help="seconds (up to a day) before a compile is killed and retried alone")
@click.option("--retry-failed", is_flag=True, help="compile jobs that failed before again")
@shard_option
@click.option("--backend", type=click.Choice(["loky", "dask"]), default="loky",
              show_default=True, help="joblib backend")
@click.option("--scheduler", default=None, metavar="ADDR", type=SchedulerParam(),
              help="dask scheduler, tcp://HOST:PORT (with --backend dask)")
@geometries_option
@cache_dir_option
@click.option("--json", "as_json", is_flag=True, help="one JSON object per target")
def build(targets, as_json, **options) -> None:
    """Walk, plan, compile and publish the jobs of each target into the cache.

    Exit 0 when nothing failed, 1 when a job failed, 2 for bad input.

    Codegen runs in the workers through the system libLLVM-22 (Debian's libllvm22);
    WGRADCACHE_CODEGEN=llvmlite uses llvmlite's LLVM instead (same bytes, slower), =llc an
    llc-22 process per job. The choice is part of the toolchain identity, so entries built
    one way are rebuilt the other way.
    """
    from wgradcache.pipeline.build import BuildRequest, check_requests

    if options["backend"] == "dask" and not options["scheduler"]:
        raise UserError("--backend dask needs --scheduler tcp://HOST:PORT")
    if options["scheduler"] and options["backend"] != "dask":
        raise UserError("--scheduler needs --backend dask")
    options.update(jobs=options["jobs"] or 0, cache_dir=str(options["cache_dir"]))
    for k in ("dtypes", "variants", "geometries"):
        options[k] = tuple(options[k])
    requests = [BuildRequest(target=t, **options) for t in targets or ("gfx1250",)]
    try:  # a bad --geometry or a missing tool for any target: refused before any builds
        check_requests(requests)
    except ValueError as e:
        raise UserError(str(e)) from None
    message = run_builds(requests, as_json)
    if message:
        raise RunFailed(message)


def run_builds(requests, as_json: bool) -> str:
    """Build each request in turn; render; return the run's failure line ("" when nothing
    failed). A two-stage entry is useless without its stage-2 kernel: exit 1 either way.
    A cache that refused a write is one line per target (``BuildSummary.stopped_line``),
    not one per job it stopped."""
    from wgradcache.pipeline.publish import group_failures

    summaries = [_one(req, show_progress=not as_json) for req in requests]
    for s in summaries:  # each reason once; per-job detail in the records and --json
        for g in group_failures(s.failures):
            click.echo(printable(g.line()), err=True)
    if as_json:
        for s in summaries:
            click.echo(json.dumps(s.to_json()))
    else:
        table("build", ("target", "jobs", "built", "relinked", "up to date", "rejected",
                        "failed", "bytes", "seconds"),
              [(s.target, s.jobs, s.built, s.relinked, s.up_to_date, s.rejected, s.failed,
                s.bytes, f"{s.seconds:.1f}") for s in summaries])
        for s in summaries:
            if s.jobs and s.built == 0 and s.relinked == 0 and s.failed == 0:
                click.echo(f"{s.target}: nothing to compile: all {s.up_to_date} jobs "
                           "up to date")
    parts = [s.stopped_line() for s in summaries if s.stopped]
    others = sum(s.failed + s.stage2_failed - s.stopped_jobs - s.stopped_stage2
                 for s in summaries)
    if others:
        parts.append(f"{others} job(s) or stage-2 kernel(s) failed; see the failures above")
    return "; ".join(parts)


def _one(req, show_progress: bool):
    from contextlib import nullcontext

    from wgradcache.pipeline.build import build

    client = _dask_client(req.scheduler) if req.backend == "dask" else nullcontext()
    with client, ProgressHook(f"build {req.target}", enabled=show_progress) as hook:
        try:
            return build(req, progress=hook.advance, on_total=hook.on_total)
        except ValueError as e:
            raise UserError(str(e)) from None


def _dask_client(scheduler: str):
    try:
        from distributed import Client
    except ImportError:
        raise UserError("--backend dask needs the dask extra: "
                        "pip install 'wgradcache[dask]'") from None
    return Client(scheduler)
