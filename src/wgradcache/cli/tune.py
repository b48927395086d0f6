"""``wgradcache tune`` (time the cached kernels on a device, or ``--import`` timings
measured elsewhere) and ``wgradcache fit`` (the cost model's constants from a class's
timings)."""

from __future__ import annotations

import click

from wgradcache.cli.app import PathParam, TargetParam, cache_dir_option, main
from wgradcache.cli.console import UserError, emit_json, printable, table
from wgradcache.cli.params import FloatParam


@main.command(name="tune")
@click.option("--target", default=None, type=TargetParam(), help="the GPU whose kernels")
@click.option("--layers", "layers_file", type=PathParam("file"), default=None, metavar="FILE",
              help="the layers to time (layers/reference.yaml's format)")
@click.option("--dtype", "dtypes", multiple=True, metavar="D",
              help="fp16, bf16, fp16_f32 or bf16_f32 (repeatable; default fp16)")
@click.option("--top", type=click.IntRange(1, 10_000), default=8, show_default=True,
              help="time select's best N kernels per layer")
@click.option("--all", "every", is_flag=True, help="time every kernel that serves a layer")
@click.option("--device", type=click.Choice(["cuda", "hip"]), default="cuda",
              show_default=True, help="where to time")
@click.option("--iters", type=click.IntRange(1, 10_000), default=10, show_default=True,
              help="timed samples per kernel (the median is kept)")
@click.option("--batch", type=click.IntRange(1, 10_000), default=10, show_default=True,
              help="launches per sample: captured into one CUDA graph, a sample is one "
                   "replay between two events (launches from the host would time the host "
                   "for a kernel shorter than its launch)")
@click.option("--warmup", type=click.IntRange(0, 10_000), default=3, show_default=True,
              help="untimed replays of the graph before the samples")
@click.option("--spin", "spin_s", type=click.FloatRange(0, 600), default=30.0,
              show_default=True, help="seconds of device work before the first timing")
@click.option("--remeasure", is_flag=True,
              help="time again the kernels this device class already has a current row of "
                   "(default: skip them, so a stopped tune goes on where it stopped)")
@click.option("--max-seconds", type=FloatParam(0, 7 * 86400), default=None, metavar="S",
              help="stop at the first kernel after S seconds: write, refit, say what is left "
                   "(exit 0); run the same command again to go on")
@click.option("--layer", "layer_names", multiple=True, metavar="NAME",
              help="only this layer of --layers (repeatable)")
@click.option("--network", "networks", multiple=True, metavar="NET",
              help="only the layers named NET/... of --layers (repeatable)")
@click.option("--import", "import_path", type=PathParam("file"), default=None, metavar="FILE",
              help="timings measured elsewhere (tune --json, or device_speed.py --out)")
@click.option("--device-class", default=None, metavar="C",
              help="with --import: the cache's device class the rows go to")
@cache_dir_option
@click.option("--json", "as_json", is_flag=True,
              help="the rows timed (what --import reads), or what was imported")
def tune(import_path, device_class, as_json, **options) -> None:
    """Time the cached kernels that serve each layer on the device and keep the times in
    the cache per device class; or --import timings measured elsewhere.

    Rows are written as they finish (a killed run keeps them), the cost model is refitted
    at the end. A kernel whose row for this device class, problem, dtype and split degree
    the cache already holds, of the blob its entry names now, is not timed again (nor a
    layer's cuDNN time) unless --remeasure: a run cut short (--max-seconds, a kill) is
    resumed by the same command. With --import every row of FILE is checked against this
    cache first (its kernel an entry, the blob it timed the entry's, the kernel serving the
    problem at that split); a file that fails any check is one line (exit 2) and nothing
    is imported.
    """
    from wgradcache.pipeline.fit import refit_line

    if import_path is not None:
        return _import(import_path, device_class, options, as_json)
    from wgradcache.cli.console import ProgressHook
    from wgradcache.pipeline.tune import TuneError, TuneRequest
    from wgradcache.pipeline.tune import tune as run_tune

    req = _tune_request(options, TuneRequest)
    with ProgressHook("tune", enabled=not as_json) as hook:
        try:
            rep = run_tune(req, advance=hook.advance, on_total=hook.on_total,
                           refit=refit_line)
        except TuneError as e:
            raise UserError(str(e)) from None
    _render_tune(rep, as_json)


def _tune_request(options: dict, request_type):
    """The TuneRequest of the command's options; UserError for a missing or bad one."""
    from wgradcache.model.spec import DTYPE_KEYS

    if options["target"] is None or options["layers_file"] is None:
        raise UserError("tune: give --target and --layers (or --import FILE)")
    dtypes = options["dtypes"] or ("fp16",)
    for d in dtypes:
        if d not in DTYPE_KEYS:
            raise UserError(f"unknown dtype {d!r}; valid: {', '.join(DTYPE_KEYS)}")
    return request_type(target=options["target"], layers_file=options["layers_file"],
                        dtypes=tuple(dtypes), top=None if options["every"] else options["top"],
                        device=options["device"], cache_dir=str(options["cache_dir"]),
                        warmup=options["warmup"], iters=options["iters"],
                        batch=options["batch"], spin_s=options["spin_s"],
                        remeasure=options["remeasure"],
                        max_seconds=options["max_seconds"],
                        layer_names=tuple(options["layer_names"]),
                        networks=tuple(options["networks"]))


def _render_tune(rep, as_json: bool) -> None:
    for line in rep.failures:
        click.echo(printable(f"tune: {line}"), err=True)
    if as_json:
        emit_json(rep.to_json())
        return
    table(f"tuned {rep.target} on {rep.device.describe()} [{rep.device.slug()}]",
          ("field", "value"), [("rows timed", len(rep.rows)),
                               ("already measured", rep.already),
                               ("vendor rows", len(rep.vendor)),
                               ("failed launches", len(rep.failures)),
                               ("left to time", rep.remaining), ("fit", rep.refit)],
          numeric_from=1)
    if rep.left_line():
        click.echo(rep.left_line())


def _import(path, device_class, options: dict, as_json: bool) -> None:
    from wgradcache.pipeline.fit import refit_line
    from wgradcache.pipeline.timing_import import ImportRefused, ImportRequest, import_timings

    try:
        rep = import_timings(ImportRequest(path=path, cache_dir=str(options["cache_dir"]),
                                           target=options["target"],
                                           device_class=device_class), refit=refit_line)
    except ImportRefused as e:
        raise UserError(str(e)) from None
    if as_json:
        emit_json(rep.to_json())
        return
    table(f"imported into {rep.target} [{rep.device_class}]", ("field", "value"),
          [("device", rep.device), ("rows read", rep.imported), ("rows added", rep.added),
           ("rows of the class", rep.rows), ("fit", rep.refit)], numeric_from=1)


@main.command(name="fit")
@click.option("--target", required=True, type=TargetParam(), help="the GPU whose kernels")
@click.option("--device-class", default=None, metavar="C",
              help="whose timings (default: the cache's only class; "
                   "a device's graph-timed class before its host-timed one)")
@cache_dir_option
@click.option("--json", "as_json", is_flag=True, help="the fit as JSON")
def fit(target, device_class, cache_dir, as_json) -> None:
    """Fit the cost model's constants to a device class's timings and store the fit
    beside them; select then ranks the kernels it has no measured time for by it."""
    from dataclasses import asdict

    from wgradcache.pipeline.fit import FitRequest, fit_class
    from wgradcache.pipeline.select import DeviceClassError

    try:
        slug, got = fit_class(FitRequest(target, str(cache_dir), device_class))
    except DeviceClassError as e:
        raise UserError(str(e)) from None
    if as_json:
        emit_json({"device_class": slug, "fit": asdict(got) if not isinstance(got, str)
                   else None, "reason": got if isinstance(got, str) else ""})
        return
    if isinstance(got, str):
        click.echo(f"{slug}: not fitted: {got}")
        return
    table(f"fit of {slug}: {got.rows} rows ({got.kernels} kernels, {got.problems} problems), "
          f"RMS relative residual {got.residual:.4f}", ("term", "ms per unit"),
          [(k, f"{v:.6g}") for k, v in got.constants.items()], numeric_from=1)
