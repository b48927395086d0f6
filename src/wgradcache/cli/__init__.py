"""The command line: click commands only, each a parse, one library call and one render.

Heavy imports live inside the commands so ``wgradcache count`` starts fast.
"""

from __future__ import annotations

import os

import click

from wgradcache.cli.console import RunFailed, UserError, debug, emit_json, table

CACHE_DIR_HELP = "cache root (default: $WGRADCACHE_DIR or ./cache)"


def _default_cache_dir() -> str:
    return os.environ.get("WGRADCACHE_DIR", "cache")


class _Group(click.Group):
    """Turns library errors about user input or set-up into one-line exit-2 errors."""

    def invoke(self, ctx: click.Context):
        from wgradcache.compile.toolchain import ToolchainError
        from wgradcache.jobs import GeometryFileError, SelectionError

        try:
            return super().invoke(ctx)
        except (GeometryFileError, SelectionError, ToolchainError) as e:
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
    return click.option("--geometries", "geometries_file", type=click.Path(dir_okay=False),
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
def count(targets, dtypes, variants, geometries_file, as_json, by_walk, as_list) -> None:
    """Jobs per target x dtype x variant, computed without building the walk."""
    from wgradcache.jobs import count_table, default_jobdata, resolve_selection, walk

    data = default_jobdata(geometries_file)
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


def _cache_dir_option(f):
    return click.option("--cache-dir", type=click.Path(file_okay=False),
                        default=_default_cache_dir, show_default="./cache or $WGRADCACHE_DIR",
                        help=CACHE_DIR_HELP)(f)


@main.command()
@click.option("--target", "targets", multiple=True, metavar="T", help="target (repeatable)")
@click.option("--dtype", "dtypes", multiple=True, metavar="D", help="restrict to dtypes")
@click.option("--variant", "variants", multiple=True, metavar="V", help="restrict to variants")
@click.option("--geometry", "geometries", multiple=True, metavar="G",
              help="restrict to a geometry, as in labels: t64x64x32-w2x2 (repeatable)")
@click.option("--limit", type=click.IntRange(min=0), default=None, help="first N jobs only")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="parallel workers (default: all cores)")
@click.option("--job-timeout", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="seconds before a compile is killed and retried alone")
@click.option("--retry-failed", is_flag=True, help="compile jobs that failed before again")
@click.option("--shard", default=None, metavar="i/n", help="build shard i of n of the job list")
@click.option("--backend", type=click.Choice(["loky", "dask"]), default="loky",
              show_default=True, help="joblib backend")
@click.option("--scheduler", default=None, metavar="ADDR",
              help="dask scheduler, tcp://HOST:PORT (with --backend dask)")
@_geometries_option
@_cache_dir_option
@click.option("--json", "as_json", is_flag=True, help="one JSON object per target")
def build(targets, dtypes, variants, geometries, limit, jobs, job_timeout, retry_failed, shard,
          backend, scheduler, geometries_file, cache_dir, as_json) -> None:
    """Walk, plan, compile and publish the jobs of each target into the cache.

    Exit 0 when nothing failed, 1 when a job failed, 2 for bad input.

    Codegen runs in the workers through the system libLLVM-22 (Debian's libllvm22);
    WGRADCACHE_CODEGEN=llvmlite uses llvmlite's LLVM instead (same bytes, slower), =llc an
    llc-22 process per job. The choice is part of the toolchain identity, so entries built
    one way are rebuilt the other way.
    """
    from wgradcache.cli.build import run_builds

    failed = run_builds(targets or ("gfx1250",), dtypes, variants, geometries, limit, jobs,
                        job_timeout, retry_failed, shard, backend, scheduler, geometries_file,
                        cache_dir, as_json)
    if failed:
        raise RunFailed(f"{failed} job(s) failed; see the failures above")


@main.command(name="ls")
@click.option("--target", default=None, help="only this target")
@click.option("--variant", default=None, help="only this variant (k_loop.epilogue.reduction)")
@_cache_dir_option
@click.option("--json", "as_json", is_flag=True)
def ls_(target, variant, cache_dir, as_json) -> None:
    """List the cache's entries."""
    from wgradcache.cache.catalog import list_entries

    rows = list_entries(cache_dir, target, variant)
    if as_json:
        emit_json(rows)
        return
    table(f"{len(rows)} entries in {cache_dir}", ("target", "key", "label", "bytes"),
          [(r["target"], r["identity_key"][:12], r["label"], r["blob_size"]) for r in rows],
          numeric_from=3)


@main.command()
@click.argument("key_or_label")
@_cache_dir_option
def show(key_or_label, cache_dir) -> None:
    """One entry: identity, code-object metadata, ISA statistics (JSON)."""
    from wgradcache.cache.catalog import EntryNotFound, find_entry

    try:
        emit_json(find_entry(cache_dir, key_or_label).entry)
    except (EntryNotFound, ValueError) as e:
        raise UserError(str(e)) from None


@main.command()
@click.argument("key_or_label")
@_cache_dir_option
@click.option("--json", "as_json", is_flag=True)
def explain(key_or_label, cache_dir, as_json) -> None:
    """Every input of an entry's content key, stored vs now: why it was (re)built."""
    from wgradcache.cache.catalog import EntryNotFound
    from wgradcache.cache.catalog import explain as explain_entry

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


@main.command()
@click.option("--from-cache", "from_cache", is_flag=True, required=True,
              help="verify what is stored (the only source today)")
@click.option("--target", "targets", multiple=True, metavar="T", help="target (repeatable)")
@click.option("--level", type=click.Choice(["integrity", "structure", "numerics"]),
              default="structure", show_default=True,
              help="each level includes the ones before it")
@click.option("--sample", type=click.FloatRange(0, 1, min_open=True), default=1.0,
              show_default=True, help="fraction of entries to run numerics on")
@click.option("--seed", type=int, default=0, show_default=True, help="sample and input seed")
@click.option("--problem", "problems", multiple=True, metavar="P",
              help="N,C,H,W,K,Y,X[,stride,pad,dilation,groups] (repeatable)")
@click.option("--device", type=click.Choice(["auto", "emulator", "hip"]), default="auto",
              show_default=True, help="where numerics run")
@click.option("--junit", type=click.Path(dir_okay=False), default=None,
              help="write JUnit XML here")
@_geometries_option
@_cache_dir_option
@click.option("--json", "as_json", is_flag=True)
def verify(from_cache, targets, level, sample, seed, problems, device, junit, geometries_file,
           cache_dir, as_json) -> None:
    """Prove the cache whole (integrity), sound (structure) and correct (numerics).

    Exit 0 when every check passed, 1 on any failure, 2 for bad input.
    """
    from wgradcache.cli.verify import run_verify

    if not run_verify(cache_dir, targets, level, sample, seed, problems, device, junit,
                      geometries_file, as_json):
        raise RunFailed("verify found failures")


@main.command(name="select")
@click.option("--target", required=True, help="the GPU to serve, e.g. gfx1250")
@click.option("--problem", required=True, metavar="P",
              help="N,C,H,W,K,Y,X[,stride,pad,dilation,groups]")
@click.option("--dtype", default="fp16", show_default=True,
              help="fp16, bf16, fp16_f32 or bf16_f32")
@click.option("--from-walk", is_flag=True, help="answer from the walk instead of the cache")
@click.option("--all-widths", is_flag=True, help="keep every vector width (no pruning)")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="show the best N")
@_geometries_option
@_cache_dir_option
@click.option("--json", "as_json", is_flag=True, help="candidates in rank order")
def select_(target, problem, dtype, from_walk, all_widths, limit, geometries_file, cache_dir,
            as_json) -> None:
    """The cached kernels that serve a problem, ranked, with split degree and launch shape."""
    from wgradcache.cli.select import run_select

    run_select(target, problem, dtype, from_walk, all_widths, limit, geometries_file,
               cache_dir, as_json)


def _spec_from_label(label: str):
    from wgradcache.model.spec import from_label

    try:
        return from_label(label)
    except ValueError as e:
        raise UserError(str(e)) from None


@main.command()
@click.option("--json", "as_json", is_flag=True, help="one JSON object")
def toolchain(as_json) -> None:
    """What a build here would use: codegen library, linker, disassembler, and the toolchain
    digest that every content key includes (a different digest rebuilds everything).

    WGRADCACHE_CODEGEN=libllvm|llvmlite|llc picks the codegen (default: libllvm when a
    libLLVM >= 22 loads, else llvmlite). WGRADCACHE_LINKER=inprocess|subprocess picks the
    linker (default: LLD in-process through the native helper, compiled once per machine
    into ~/.cache/wgradcache/native/, else an ld.lld process; linker_note says why). Both
    linkers give the same bytes and the same digest.
    """
    from wgradcache.compile.toolchain import toolchain_report

    doc = toolchain_report()
    if as_json:
        emit_json(doc)
    else:
        table("toolchain", ("item", "value"), ((k, "" if v is None else str(v))
                                                for k, v in doc.items()), numeric_from=2)


@main.command(name="compile")
@click.argument("label")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="out",
              show_default=True, help="directory for <label>.ll/.s/.hsaco/.json")
@click.option("--no-validate", is_flag=True, help="compile even a spec the rules refuse")
@click.option("--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the .json document")
def compile_(label, out_dir, no_validate, timeout, as_json) -> None:
    """Compile one job outside the cache, to reproduce and inspect it."""
    from wgradcache.pipeline.reproduce import compile_one

    try:
        rep = compile_one(_spec_from_label(label), out_dir, timeout, check=not no_validate)
    except ValueError as e:
        raise UserError(str(e)) from None
    if as_json:
        emit_json(rep.doc)
    else:
        for kind, path in rep.files.items():
            click.echo(f"{kind:6} {path}")
        if rep.ok:
            co, isa = rep.doc["code_object"], rep.doc["isa"]
            click.echo(f"vgpr {co['vgpr_count']} sgpr {co['sgpr_count']} "
                       f"spills {co['vgpr_spill_count']}/{co['sgpr_spill_count']} "
                       f"lds {co['group_segment_fixed_size']} B "
                       f"scratch {co['private_segment_fixed_size']} B; "
                       f"mma {isa['mma']} barriers {isa['barriers']} "
                       f"atomics {isa['global_atomics']}")
    if not rep.ok:
        raise RunFailed(f"compile failed: {rep.error}")


@main.command()
@click.argument("label")
@click.option("--problem", required=True, metavar="P",
              help="N,C,H,W,K,Y,X[,stride,pad,dilation,groups]")
@click.option("--split-k", type=click.IntRange(min=1), default=None,
              help="explicit split degree (default: the policy's)")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def emulate(label, problem, split_k, seed, as_json) -> None:
    """Run one kernel in the emulator against the float64 reference.

    Exit 0 on pass, 1 on fail, 2 when the kernel cannot serve the problem.
    """
    from wgradcache.cli.kernel import run_emulate

    if not run_emulate(_spec_from_label(label), problem, split_k, seed, as_json):
        raise RunFailed("error above the bound")


@main.command(name="gc")
@click.option("--target", "targets", multiple=True, metavar="T", help="target (repeatable)")
@click.option("--stale", is_flag=True, help="remove entries the current walk no longer yields")
@click.option("--orphans", is_flag=True, help="remove blobs no entry names")
@click.option("--max-size", default=None, metavar="SIZE",
              help="then evict least-recently-used blobs past SIZE (e.g. 2G)")
@click.option("--dry-run", is_flag=True, help="report, remove nothing")
@_geometries_option
@_cache_dir_option
@click.option("--json", "as_json", is_flag=True)
def gc_(targets, stale, orphans, max_size, dry_run, geometries_file, cache_dir,
        as_json) -> None:
    """Remove stale entries, orphan blobs, then LRU blobs past a size bound.

    With no flag, does --stale --orphans. Safe against a concurrent build.
    """
    from wgradcache.cli.cache import run_gc

    run_gc(targets, stale, orphans, max_size, dry_run, geometries_file, cache_dir, as_json)


@main.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--into", "dest", required=True, type=click.Path(file_okay=False),
              help="the cache to merge into")
@click.option("--json", "as_json", is_flag=True)
def merge(sources, dest, as_json) -> None:
    """Union shard caches into one; refuses conflicting entries, writes nothing then."""
    from wgradcache.cli.cache import run_merge

    if not run_merge(sources, dest, as_json):
        raise RunFailed("conflicting entries: nothing merged")


@main.command()
@click.option("--plan", "plan_path", required=True, type=click.Path(dir_okay=False),
              help="the plan, e.g. jobs/nightly.yaml")
@click.option("--report-dir", default="report", show_default=True,
              type=click.Path(file_okay=False), help="where report.json and report.md go")
@click.option("--shard", default=None, metavar="i/n", help="build shard i of n")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None)
@_geometries_option
@_cache_dir_option
@click.option("--json", "as_json", is_flag=True, help="print report.json")
def refresh(plan_path, report_dir, shard, jobs, geometries_file, cache_dir, as_json) -> None:
    """The nightly job: build the plan incrementally, gc, verify, write the report."""
    from wgradcache.cli.cache import run_refresh

    if not run_refresh(plan_path, report_dir, shard, jobs, geometries_file, cache_dir,
                       as_json):
        raise RunFailed(f"refresh failed; see {report_dir}/report.md")


def _short(v) -> str:
    import json

    s = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return s if len(s) <= 60 else s[:57] + "..."


__all__ = ["main", "RunFailed"]
