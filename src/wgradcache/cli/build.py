"""``wgradcache build`` for people and machines: progress, the summary table, --json lines.

Kept out of ``build.py`` (which knows nothing of terminals) and out of ``cli.py`` (which only
parses).
"""

from __future__ import annotations

import json

import click

from wgradcache.cli.console import UserError, progress, table
from wgradcache.model.targets import TARGETS
from wgradcache.pipeline.build import BuildRequest, BuildSummary, build, parse_shard

__all__ = ["run_builds"]


def run_builds(targets, dtypes, variants, geometries, limit, jobs, job_timeout, retry_failed,
               shard, backend, scheduler, geometries_file, cache_dir, as_json) -> int:
    """Build each target; render; return the number of failed jobs."""
    for t in targets:
        if t not in TARGETS:
            raise UserError(f"unknown target {t!r}; valid: {', '.join(TARGETS)}")
        if not TARGETS[t].has_kernels:
            raise UserError(f"{t}: no kernel generator for {TARGETS[t].family} targets yet")
    try:
        shard_t = parse_shard(shard) if shard else None
    except ValueError as e:
        raise UserError(str(e)) from None
    if backend == "dask" and not scheduler:
        raise UserError("--backend dask needs --scheduler tcp://HOST:PORT")
    summaries: list[BuildSummary] = []
    for t in targets:
        req = BuildRequest(target=t, dtypes=tuple(dtypes), variants=tuple(variants),
                           geometries=tuple(geometries), limit=limit, shard=shard_t,
                           jobs=jobs or 0, job_timeout=job_timeout, retry_failed=retry_failed,
                           backend=backend, scheduler=scheduler,
                           geometries_file=geometries_file, cache_dir=str(cache_dir))
        try:
            summaries.append(_one(req, show_progress=not as_json))
        except ValueError as e:
            raise UserError(str(e)) from None
    failed = sum(s.failed for s in summaries)
    for s in summaries:
        for f in s.failures:
            click.echo(f"FAILED {f['label']}: {f['reason']}"
                       + (" (failed before; --retry-failed compiles it again)"
                          if f.get("previous") else ""), err=True)
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
    return failed


def _one(req: BuildRequest, show_progress: bool) -> BuildSummary:
    if req.backend == "dask":
        return _with_dask(req, show_progress)
    return _with_progress(req, show_progress)


def _with_progress(req: BuildRequest, show_progress: bool) -> BuildSummary:
    state: dict = {}

    def on_total(n: int, work: float) -> None:
        state["bar"] = progress(n, f"build {req.target}", enabled=show_progress,
                                work_total=work)
        state["advance"] = state["bar"].__enter__()

    def advance(n: int, work: float) -> None:
        if "advance" in state:
            state["advance"](n, work)

    try:
        return build(req, progress=advance, on_total=on_total)
    finally:
        if "bar" in state:
            state["bar"].__exit__(None, None, None)


def _with_dask(req: BuildRequest, show_progress: bool) -> BuildSummary:
    try:
        from distributed import Client
    except ImportError:
        raise UserError("--backend dask needs the dask extra: "
                        "pip install 'wgradcache[dask]'") from None
    with Client(req.scheduler):
        return _with_progress(req, show_progress)
