"""``gc``, ``merge`` and ``refresh`` rendering: input checks, one library call, output."""

from __future__ import annotations

import json
from pathlib import Path

import click

from wgradcache.cli.console import UserError, emit_json, table

__all__ = ["run_gc", "run_merge", "run_refresh"]


def run_gc(targets, stale, orphans, max_size, dry_run, geometries_file, cache_dir,
           as_json) -> None:
    from wgradcache.cache.catalog import cache_targets
    from wgradcache.cache.gc import gc, parse_size
    from wgradcache.cache.store import TargetCache
    from wgradcache.jobs import default_jobdata, walk
    from wgradcache.model.spec import DTYPE_KEYS

    try:
        bound = parse_size(max_size) if max_size else None
    except ValueError as e:
        raise UserError(str(e)) from None
    if not (stale or orphans or bound is not None):
        stale = orphans = True
    data = default_jobdata(geometries_file)
    reports = []
    for t in targets or cache_targets(cache_dir):
        live = {s.identity_key() for s in walk(t, DTYPE_KEYS, None, data)} if stale else None
        reports.append(gc(TargetCache(cache_dir, t), live, stale=stale, orphans=orphans,
                          max_size=bound, dry_run=dry_run).to_json())
    if as_json:
        emit_json(reports)
        return
    table(f"gc{' (dry run)' if dry_run else ''}", ("target", "stale", "corrupt", "orphans",
                                                   "evicted", "bytes before", "bytes after"),
          [(r["target"], r["stale_entries"], r["corrupt_entries"], r["orphan_blobs"],
            r["evicted_blobs"], r["bytes_before"], r["bytes_after"]) for r in reports])


def run_merge(sources, dest, as_json) -> bool:
    from wgradcache.cache.merge import merge

    try:
        rep = merge(list(sources), dest)
    except ValueError as e:
        raise UserError(str(e)) from None
    if as_json:
        emit_json(rep.to_json())
    else:
        for c in rep.conflicts:
            click.echo(f"CONFLICT {c['target']} {c.get('label') or c['identity_key']} "
                       f"from {c['source']}: {c['reason']}", err=True)
        click.echo(f"merged {rep.copied_entries} entries ({rep.copied_blobs} blobs), "
                   f"{rep.skipped} already present, {len(rep.conflicts)} conflicts")
    return rep.ok


def run_refresh(plan_path, report_dir, shard, jobs, geometries_file, cache_dir,
                as_json) -> bool:
    from wgradcache.pipeline.build import parse_shard
    from wgradcache.pipeline.refresh import PlanError, load_plan, refresh

    try:
        plan = load_plan(plan_path)
        shard_t = parse_shard(shard) if shard else None
    except (PlanError, ValueError) as e:
        raise UserError(str(e)) from None
    doc = refresh(plan, str(cache_dir), report_dir, jobs=jobs or 0, shard=shard_t,
                  geometries_file=geometries_file)
    if as_json:
        click.echo(json.dumps(doc, indent=1, sort_keys=True))
    else:
        click.echo(Path(report_dir, "report.md").read_text())
    return doc["ok"]
