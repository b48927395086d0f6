"""One kernel outside the cache: ``emulate`` (the emulator against float64), ``compile``
(its .ll/.s/.hsaco/.json), and ``toolchain`` (what compiling here uses)."""

from __future__ import annotations

import click

from wgradcache.cli.app import geometries_option, json_option, main
from wgradcache.cli.console import RunFailed, UserError, emit_json, table
from wgradcache.cli.params import (
    MAX_SEED,
    IntParam,
    LabelParam,
    PathParam,
    ProblemParam,
    SecondsParam,
    TargetParam,
)


def _max_grid_z() -> int:
    from wgradcache.wgrad.capability import MAX_GRID_Z

    return MAX_GRID_Z


@main.command()
@click.argument("spec", metavar="LABEL", type=LabelParam())
@click.option("--problem", required=True, metavar="P", type=ProblemParam(),
              help="N,C,H,W,K,Y,X[,stride,pad,dilation,groups]")
@click.option("--split-k", type=IntParam(1, _max_grid_z), default=None,
              help="explicit split degree (default: the policy's)")
@click.option("--seed", type=IntParam(0, MAX_SEED), default=0, show_default=True,
              help=f"input seed (0 to {MAX_SEED})")
@geometries_option
@json_option
def emulate(as_json, **options) -> None:
    """Run one kernel in the emulator against the float64 reference.

    Exit 0 on pass, 1 on fail, 2 when the kernel cannot serve the problem.
    """
    from wgradcache.pipeline.emulate import EmulateRequest, NotServed, emulate_one

    try:  # spec, problem, split_k, seed, geometries_file
        r = emulate_one(EmulateRequest(**options))
    except NotServed as e:
        raise UserError(str(e)) from None
    if as_json:
        emit_json(r.to_json())
    else:
        click.echo(r.summary())
    if not r.passed:
        raise RunFailed("error above the bound")


@main.command(name="compile")
@click.argument("spec", metavar="LABEL", type=LabelParam())
@click.option("--out", "out_dir", type=PathParam("dir"), default="out",
              show_default=True, help="directory for <label>.ll/.s/.hsaco/.json")
@click.option("--no-validate", is_flag=True, help="compile even a spec the rules refuse")
@click.option("--timeout", type=SecondsParam(), default=300.0, show_default=True,
              help="seconds (up to a day) before the compile is killed")
@geometries_option
@click.option("--json", "as_json", is_flag=True, help="print the .json document")
def compile_(spec, no_validate, as_json, **options) -> None:
    """Compile one job outside the cache, to reproduce and inspect it."""
    from wgradcache.pipeline.reproduce import compile_one, summary_line

    try:  # out_dir, timeout, geometries_file
        rep = compile_one(spec, check=not no_validate, **options)
    except ValueError as e:
        raise UserError(str(e)) from None
    if as_json:
        emit_json(rep.doc)
    else:
        for path in rep.files.values():  # each file by its own suffix (.cubin, .ptx, ...)
            click.echo(f"{path.rsplit('.', 1)[-1]:6} {path}")
        if rep.ok:
            click.echo(summary_line(spec, rep.doc))
    if not rep.ok:
        raise RunFailed(f"compile failed: {rep.error}")


@main.command()
@click.option("--target", "targets", multiple=True, metavar="T", type=TargetParam(kernels=True),
              help="only these targets; exit 1 when one of them cannot be built here")
@json_option
def toolchain(targets, as_json) -> None:
    """What a build here would use (codegen library, linker, disassembler, ptxas, nvdisasm),
    the toolchain digest that every content key includes (a different digest rebuilds
    everything), and per target whether a build would work and what is missing: the same
    check build, refresh, compile and verify --level reproduce make before their first job.

    WGRADCACHE_CODEGEN=libllvm|llvmlite|llc picks the codegen (default: libllvm when a
    libLLVM >= 22 loads, else llvmlite). WGRADCACHE_LINKER=inprocess|subprocess picks the
    linker (default: LLD in-process through the native helper, compiled once per machine
    into ~/.cache/wgradcache/native/, else an ld.lld process; linker_note says why). Both
    linkers give the same bytes and the same digest. WGRADCACHE_PTXAS and
    WGRADCACHE_NVDISASM name the NVIDIA tools; `pip install 'wgradcache[nvidia]'` brings
    both.
    """
    from wgradcache.compile.toolchain import toolchain_report

    doc = toolchain_report(tuple(targets))
    if as_json:
        emit_json(doc)
    else:
        rows = [(k, "" if v is None else str(v)) for k, v in doc.items() if k != "targets"]
        rows += [(f"build {t}", "yes" if d["buildable"] else "no: " + "; ".join(
            f"{c['tool']}: {c['problem']}" for c in d["tools"] if not c["ok"]))
            for t, d in doc["targets"].items()]
        table("toolchain", ("item", "value"), rows, numeric_from=2)
    missing = [t for t, d in doc["targets"].items() if not d["buildable"]]
    if targets and missing:
        raise RunFailed(f"cannot be built here: {', '.join(missing)}")
