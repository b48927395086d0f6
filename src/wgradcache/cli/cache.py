"""The cache's own commands: ``ls``, ``show``, ``explain``, ``gc``, ``merge``, ``refresh``."""

from __future__ import annotations

import json

import click

from wgradcache.cli.app import (
    cache_dir_option,
    geometries_option,
    jobs_option,
    json_option,
    main,
    shard_option,
)
from wgradcache.cli.console import RunFailed, UserError, emit_json, printable, table
from wgradcache.cli.params import PathParam, SizeParam, TargetParam, VariantParam


@main.command(name="ls")
@click.option("--target", default=None, type=TargetParam(), help="only this target")
@click.option("--variant", default=None, type=VariantParam(),
              help="only this variant (k_loop.epilogue.reduction)")
@cache_dir_option
@json_option
def ls_(target, variant, cache_dir, as_json) -> None:
    """List the cache's entries (a corrupt one as "?", with its reason on stderr)."""
    from wgradcache.cache.catalog import foreign_folders, list_entries

    rows = list_entries(cache_dir, target, variant)
    for line in foreign_folders(cache_dir) + [r["error"] for r in rows if "error" in r]:
        click.echo(printable(line), err=True)
    if as_json:
        emit_json(rows)
        return
    table(f"{len(rows)} entries in {cache_dir}", ("target", "key", "label", "bytes"),
          [(r["target"], r["identity_key"][:12], r["label"], r["blob_size"]) for r in rows],
          numeric_from=3)


# (label, where in the entry) of the ISA figures `show` prints for people (the code object's
# resources come from the target's backend, in its vendor's words); --json prints it all.
_SHOWN = (
    ("instructions", ("isa", "instructions")), ("mma", ("isa", "mma")),
    ("LDS loads", ("isa", "ds_loads")), ("LDS stores", ("isa", "ds_stores")),
    ("global loads", ("isa", "global_loads")), ("global stores", ("isa", "global_stores")),
    ("async copies", ("isa", "async_copies")), ("barriers", ("isa", "barriers")),
    ("global atomics", ("isa", "global_atomics")), ("CAS loops", ("isa", "cas_loops")),
    # the main loop: one iteration is one K tile (compile/isa.py main_loop)
    ("main loop instructions", ("isa", "main_loop_instructions")),
    ("main loop mma", ("isa", "main_loop_mma")),
    ("main loop LDS reads", ("isa", "main_loop_ds_loads")),
    ("main loop LDS read bytes", ("isa", "main_loop_ds_load_bytes")),
    ("main loop LDS reads < 128 bit", ("isa", "main_loop_ds_loads_narrow")),
    ("main loop transposing LDS reads", ("isa", "main_loop_ds_loads_tr")),
    ("main loop LDS stores", ("isa", "main_loop_ds_stores")),
    ("main loop global loads", ("isa", "main_loop_global_loads")),
    ("main loop async copies", ("isa", "main_loop_async_copies")),
    ("main loop VALU", ("isa", "main_loop_valu")),
    ("main loop SALU", ("isa", "main_loop_salu")),
    ("main loop exec-mask branches", ("isa", "main_loop_exec_branches")),
    ("main loop waits", ("isa", "main_loop_waits")),
    ("main loop barriers", ("isa", "main_loop_barriers")),
)


def _field(entry: dict, path: tuple[str, ...]):
    v = entry
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    return v


def _resources(target: str, e: dict) -> list[tuple[str, object]]:
    from wgradcache.model.backends import backend_of

    co = e.get("code_object")
    return backend_of(target).resource_rows(co) if isinstance(co, dict) else []


@main.command()
@click.argument("key_or_label")
@cache_dir_option
@json_option
def show(key_or_label, cache_dir, as_json) -> None:
    """One entry: label, variant, blob, registers, LDS, ISA figures (--json: the whole entry)."""
    from wgradcache.cache.catalog import EntryNotFound, find_entry
    from wgradcache.cache.store import blob_suffix
    from wgradcache.kernel.mma import transposed_read_provenance

    try:
        found = find_entry(cache_dir, key_or_label)
    except (EntryNotFound, ValueError) as e:
        raise UserError(str(e)) from None
    e = found.entry
    if as_json:
        emit_json(e)
        return
    head = [("label", e.get("label")), ("identity key", found.identity_key),
            ("variant", e.get("variant")), ("dtype", e.get("dtype")),
            ("blob", f"{found.target}/blobs/{e.get('blob')}{blob_suffix(found.target)}"),
            ("blob bytes", e.get("blob_size")), ("block size", e.get("block_size"))]
    rows = head + _resources(found.target, e) + [
        (name, _field(e, path)) for name, path in _SHOWN if _field(e, path) is not None]
    if _field(e, ("isa", "main_loop_ds_loads_tr")):
        rows.append(("transposing read lane map", transposed_read_provenance(found.target)))
    table(str(e.get("label")), ("field", "value"),
          [(k, "" if v is None else v) for k, v in rows], numeric_from=1)
    _show_measured(cache_dir, found)


def _show_measured(cache_dir, found) -> None:
    """The kernel's measured times, one table per device class (none: nothing printed)."""
    from wgradcache.cache.catalog import measured_times

    got, bad = measured_times(cache_dir, found)
    for line in bad:
        click.echo(printable(f"show: {line} (not read)"), err=True)
    for m in got:
        stale = f"; {m.stale} stale row(s) of an older blob, ignored" if m.stale else ""
        factor = ("" if m.factor is None else
                  f"; fit factor {m.factor:.4g} (its measured over the fitted model's times)")
        table(f"measured on {m.device} [{m.device_class}]{stale}{factor}",
              ("problem", "dtype", "split", "median ms", "spread ms", "iterations",
               "vendor ms"),
              [(r.problem, r.dtype, r.degree, f"{r.median_ms:.4f}", f"{r.spread_ms:.4f}",
                r.iterations, m.vendor_text(r)) for r in m.rows], numeric_from=2)


@main.command()
@click.argument("key_or_label")
@cache_dir_option
@json_option
def explain(key_or_label, cache_dir, as_json) -> None:
    """Every input of an entry's content key, stored vs now: why it was (re)built."""
    from wgradcache.cache.catalog import EntryNotFound
    from wgradcache.pipeline.explain import explain as explain_entry

    try:
        doc = explain_entry(cache_dir, key_or_label)
    except (EntryNotFound, ValueError) as e:
        raise UserError(str(e)) from None
    if as_json:
        emit_json(doc)
        return
    table(f"{doc['label']}: content key {doc['content_key'][:16]} "
          f"({'unchanged' if doc['up_to_date'] else 'now ' + doc['content_key_now'][:16]})",
          ("input", "same", "stored", "now"),
          [(r["input"], "yes" if r["same"] else "CHANGED", _short(r["stored"]),
            _short(r["now"])) for r in doc["inputs"]], numeric_from=9)


def _short(v) -> str:
    s = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return s if len(s) <= 60 else s[:57] + "..."


@main.command(name="gc")
@click.option("--target", "targets", multiple=True, metavar="T", type=TargetParam(),
              help="target (repeatable)")
@click.option("--stale", is_flag=True, help="remove entries the current walk no longer yields")
@click.option("--orphans", is_flag=True, help="remove blobs no entry names")
@click.option("--max-size", default=None, metavar="SIZE", type=SizeParam(),
              help="then evict the oldest-published blobs past SIZE (e.g. 2G)")
@click.option("--dry-run", is_flag=True, help="report, remove nothing")
@geometries_option
@cache_dir_option
@json_option
def gc_(as_json, **options) -> None:
    """Remove stale entries, orphan blobs, then the oldest blobs past a size bound.

    With no flag, does --stale --orphans. Safe against a concurrent build.
    """
    from wgradcache.pipeline.gc import GcRequest, collect

    req = GcRequest(**{**options, "targets": tuple(options["targets"]),
                       "cache_dir": str(options["cache_dir"])})
    from wgradcache.cache.catalog import foreign_folders

    found = collect(req)
    for line in foreign_folders(req.cache_dir) + [n for r in found for n in r.notes]:
        click.echo(printable(line), err=True)
    reports = [r.to_json() for r in found]
    if as_json:
        emit_json(reports)
        return
    table(f"gc{' (dry run)' if req.dry_run else ''}",
          ("target", "stale", "corrupt", "orphans", "evicted", "timing rows", "bytes before",
           "bytes after"),
          [(r["target"], r["stale_entries"], r["corrupt_entries"], r["orphan_blobs"],
            r["evicted_blobs"], r["timing_rows"], r["bytes_before"], r["bytes_after"])
           for r in reports])


@main.command()
@click.argument("sources", nargs=-1, required=True, type=PathParam("any"))
@click.option("--into", "dest", required=True, type=PathParam("any"),
              help="the cache to merge into")
@json_option
def merge(sources, dest, as_json) -> None:
    """Union shard caches into one, checking them whole first; writes nothing on a finding.

    A record built by this tool's generator and toolchain supersedes an older build of the
    same kernel; other bytes from the same generator and toolchain are a conflict.
    """
    from wgradcache.cache.entry import CorruptEntry
    from wgradcache.pipeline.merge import merge_shards

    try:
        rep = merge_shards(list(sources), dest)
    except CorruptEntry as e:  # a source changed while it was copied
        raise RunFailed(str(e)) from None
    except ValueError as e:
        raise UserError(str(e)) from None
    if as_json:
        emit_json(rep.to_json())
    elif rep.ok:
        click.echo(f"merged {rep.copied_entries} entries and {rep.copied_stage2} stage-2 "
                   f"kernels ({rep.copied_blobs} blobs), {rep.skipped} already present, "
                   f"{rep.superseded} superseded")
    for f in [] if as_json else rep.findings:
        click.echo(printable(f.line()), err=True)
    if not rep.ok:
        raise RunFailed(f"{len(rep.findings)} finding(s): nothing merged")


@main.command()
@click.option("--plan", "plan_path", required=True, type=PathParam("file"),
              help="the plan, e.g. jobs/nightly.yaml")
@click.option("--report-dir", default="report", show_default=True,
              type=PathParam("dir"), help="where report.json and report.md go")
@shard_option
@jobs_option
@geometries_option
@cache_dir_option
@click.option("--json", "as_json", is_flag=True, help="print report.json")
def refresh(plan_path, as_json, **options) -> None:
    """The nightly job: build the plan incrementally, gc, verify, write the report."""
    from wgradcache.pipeline.refresh import (
        PlanError,
        RefreshRequest,
        ReportRefused,
        load_plan,
        render_markdown,
    )
    from wgradcache.pipeline.refresh import refresh as run_refresh

    try:
        plan = load_plan(plan_path)
    except (PlanError, ValueError) as e:
        raise UserError(str(e)) from None
    options.update(jobs=options["jobs"] or 0, cache_dir=str(options["cache_dir"]))
    report_dir = options["report_dir"]
    try:
        doc = run_refresh(RefreshRequest(plan=plan, **options))
    except ReportRefused as e:
        raise UserError(str(e)) from None
    if as_json:
        click.echo(json.dumps(doc, indent=1, sort_keys=True))
    else:
        click.echo(render_markdown(doc))  # what report.md holds, not read back
    if not doc["ok"]:
        raise RunFailed(f"refresh failed; see {report_dir}/report.md")
