"""``wgradcache tune`` (time the cached kernels on a device, or ``--import`` timings
measured elsewhere) and ``wgradcache fit`` (the cost model's constants from a class's
timings)."""

from __future__ import annotations

import click

from wgradcache.cli.app import PathParam, TargetParam, cache_dir_option, main
from wgradcache.cli.console import UserError, emit_json, table


@main.command(name="tune")
@click.option("--target", default=None, type=TargetParam(), help="the GPU whose kernels")
@click.option("--import", "import_path", type=PathParam("file"), default=None, metavar="FILE",
              help="timings measured elsewhere (tune --json, or device_speed.py --out)")
@click.option("--device-class", default=None, metavar="C",
              help="the cache's device class the rows go to (default: the file's)")
@cache_dir_option
@click.option("--json", "as_json", is_flag=True, help="what was imported, as JSON")
def tune(target, import_path, device_class, cache_dir, as_json) -> None:
    """Keep measured kernel times in the cache, per device class.

    With --import: every row of FILE is checked against this cache (its kernel an entry,
    the blob it timed the entry's, the kernel serving the problem at that split), then the
    rows are merged into the class's timings and the cost model is refitted. A file that
    fails any check is one line (exit 2) and nothing is imported.
    """
    from wgradcache.pipeline.fit import refit_line
    from wgradcache.pipeline.timing_import import ImportRefused, ImportRequest, import_timings

    if import_path is None:
        raise UserError("tune: give --import FILE (timing on the device: not in this build)")
    try:
        rep = import_timings(ImportRequest(path=import_path, cache_dir=str(cache_dir),
                                           target=target, device_class=device_class),
                             refit=refit_line)
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
              help="whose timings (default: the cache's only class)")
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
