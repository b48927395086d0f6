"""``wgradcache verify``: the options as one ``VerifyRequest``, progress, the summary,
JUnit, ``--json``."""

from __future__ import annotations

import json
from contextlib import contextmanager

import click

from wgradcache.cli.app import cache_dir_option, geometries_option, json_option, main
from wgradcache.cli.console import (
    ProgressHook,
    RunFailed,
    UserError,
    emit_json,
    printable,
    table,
)
from wgradcache.cli.params import (
    MAX_SEED,
    FloatParam,
    IntParam,
    PathParam,
    ProblemParam,
    RegexParam,
    TargetParam,
)


@main.command()
@click.option("--from-cache", "from_cache", is_flag=True, required=True,
              help="verify what is stored (the only source today)")
@click.option("--target", "targets", multiple=True, metavar="T", type=TargetParam(),
              help="target (repeatable)")
# pipeline.verify.LEVELS, spelled here so `wgradcache --help` imports no cache code (a test
# keeps the two equal)
@click.option("--level", type=click.Choice(["integrity", "structure", "reproduce", "numerics"]),
              default="structure", show_default=True,
              help="each level includes the ones before it: integrity (files, sizes, "
                   "sha256), structure (the stored binary disassembled and checked against "
                   "its spec and entry), reproduce (each job compiled again must give its "
                   "stored blob byte for byte), numerics (the reproduced IR run against "
                   "float64)")
@click.option("--sample", type=FloatParam(0, 1, lo_open=True), default=1.0,
              show_default=True, help="fraction (0, 1] of entries to reproduce and run "
                                      "numerics on")
@click.option("--seed", type=IntParam(0, MAX_SEED), default=0, show_default=True,
              help=f"sample and input seed (0 to {MAX_SEED})")
@click.option("--label", default="", metavar="REGEX", type=RegexParam(),
              help="structure, reproduce and numerics only on the entries whose label this "
                   "regular expression finds (integrity still checks every entry and blob), "
                   "e.g. 'fp16-.*-sync-default-none$'")
@click.option("--problem", "problems", multiple=True, metavar="P", type=ProblemParam(),
              help="N,C,H,W,K,Y,X[,stride,pad,dilation,groups] (repeatable)")
@click.option("--device", type=click.Choice(["auto", "emulator", "hip", "cuda"]), default="auto",
              show_default=True, help="where numerics run")
@click.option("--reproduce/--no-reproduce", default=True, show_default=True,
              help="numerics: compile every job again first. --no-reproduce (a device "
                   "machine without the build's toolchain) proves less: each blob is held "
                   "only to the facts of its spec that show in its bytes (symbol, kernel "
                   "arguments, LDS, block, loads per K step, ISA counts) and the re-emitted "
                   "IR to the blob's key; it is not proven that the bytes are the compile of "
                   "that IR, so a binary of the same shape (another dtype's, say) passes, "
                   "and in the emulator numerics run the IR, not the binary")
@click.option("--junit", type=PathParam("file"), default=None,
              help="write JUnit XML here")
@click.option("--stream", type=PathParam("file"), default=None,
              help="numerics: write each entry's result here as one JSON line the moment it "
                   "is decided (the --json numerics rows), so a run that is killed or times "
                   "out keeps what it did")
@geometries_option
@cache_dir_option
@json_option
def verify(from_cache, junit, stream, as_json, **options) -> None:
    """Prove the cache whole (integrity), sound (structure), reproducible (reproduce) and
    correct (numerics).

    Exit 0 when every check passed, 1 on any failure, 2 for bad input.
    """
    from wgradcache.cache.catalog import cache_targets, foreign_folders
    from wgradcache.cache.store import TargetCache
    from wgradcache.pipeline.verify import VerifyRequest

    options.update(targets=tuple(options["targets"]), cache_dir=str(options["cache_dir"]),
                   problems=tuple(p.short() for p in options["problems"]))
    req = VerifyRequest(**options)
    if not req.targets and not cache_targets(req.cache_dir):
        raise UserError(f"no cache under {req.cache_dir}: nothing to verify (build one with "
                        "`wgradcache build --target gfx1250`)")
    for t in req.targets:  # an absent folder is no cache, not a clean one
        where = TargetCache(req.cache_dir, t)
        if where.checked_dir(None) is None:
            raise UserError(f"--target: no cache for target {t} at {where.dir}")
    for line in foreign_folders(req.cache_dir):  # a cache's strays (not a refusal's)
        click.echo(printable(line), err=True)
    if not run_verify(req, junit, as_json, stream):
        raise RunFailed("verify found failures or entries no --problem covers")


def run_verify(req, junit: str | None, as_json: bool, stream: str | None = None) -> bool:
    from wgradcache.pipeline.verify import verify

    with _stream(stream) as on_result, \
            ProgressHook("numerics", enabled=not as_json) as hook:
        rep = verify(req, advance=hook.advance, on_total=hook.on_total, on_result=on_result)
    if as_json:
        emit_json(rep.to_json())
    else:
        _render(req, rep)
    if junit:
        _write_junit(rep, junit)
    return rep.ok


@contextmanager
def _stream(path: str | None):
    """``--stream``: the file opened (truncated) before any work, so a bad path is one line
    and nothing run; each result a flushed line."""
    from wgradcache.files.capped import Refused
    from wgradcache.files.written import open_stream, refusal

    if path is None:
        yield None
        return
    try:
        f = open_stream(path)
    except Refused as e:
        raise UserError(f"--stream {path}: cannot write: {refusal(e)}") from None
    with f:
        def write(result) -> None:
            f.write(json.dumps(result.to_json(), sort_keys=True) + "\n")
            f.flush()
        yield write


def _write_junit(rep, path: str) -> None:
    from wgradcache.files.capped import Refused
    from wgradcache.files.written import refusal
    from wgradcache.pipeline.verify import write_junit

    try:
        write_junit(rep, path)
    except OSError as e:  # after the report: the results are on screen either way
        raise RunFailed(f"--junit {path}: {e.strerror or e}") from None
    except Refused as e:
        raise RunFailed(f"--junit {path}: cannot write: {refusal(e)}") from None


def _render(req, rep) -> None:
    for note in rep.notes:
        click.echo(printable(note), err=True)
    for f in rep.failures:
        click.echo(printable(f"FAIL [{f.level}] {f.label or f.key}: {f.reason}"), err=True)
    table(f"verify --level {req.level}: {'ok' if rep.ok else 'FAILED'}",
          ("target", "entries", "expected (count)", "missing", "complete"),
          [(t, d["entries"], d["expected"], d["missing"], "yes" if d["complete"] else "no")
           for t, d in rep.targets.items()])
    if rep.numerics:  # what each entry ran: its problems and split degrees
        table("numerics", ("entry", "status", "problem at split degrees"),
              [(n.label, n.status.replace("_", " "), n.describe()) for n in rep.numerics],
              numeric_from=3)
    click.echo(f"checked {rep.checked}, failed {len(rep.failures)}"
               + (f", not covered {len(rep.not_covered)}" if rep.numerics else ""))
