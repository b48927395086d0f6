"""The click group and the options every command shares; the parameter types behind them
(one per kind of value a user types) live in ``cli/params.py``.

Bad values fail at parse time with one line (``error: ...``, not click's usage block) and
exit 2, click's own usage errors too (a bad choice, a missing option: ``_usage_line``);
library errors about user input or set-up become the same one line (``_Group.invoke``).
"""

from __future__ import annotations

import os

import click

from wgradcache.cli.console import RunFailed, UserError, debug
from wgradcache.cli.params import (
    DtypeParam,
    IntParam,
    LabelParam,
    PathParam,
    ProblemParam,
    ShardParam,
    TargetParam,
    VariantParam,
    max_jobs,
)

__all__ = ["main", "cache_dir_option", "geometries_option", "selection_options",
           "json_option", "shard_option", "jobs_option", "TargetParam", "ProblemParam",
           "LabelParam", "PathParam"]


class _Group(click.Group):
    """Turns library errors about user input or set-up into one-line exit-2 errors, and an
    operating-system error no layer below handled (a full disk, a read-only or unreadable
    path) into one line naming the path, exit 1: never a traceback without WGRADCACHE_DEBUG.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            raise _usage_line(e) from None

    def invoke(self, ctx: click.Context):
        from wgradcache.compile.toolchain import ToolchainError
        from wgradcache.jobs import GeometryFileError, SelectionError

        try:
            return super().invoke(ctx)
        except click.UsageError as e:  # a subcommand's options, or no such subcommand
            raise _usage_line(e) from None
        except (GeometryFileError, SelectionError, ToolchainError) as e:
            if debug():
                raise
            raise UserError(str(e)) from None
        except (ValueError, OSError) as e:
            err = None if debug() else _one_line(e)
            if err is None:
                raise
            raise err from None


def _usage_line(e: click.UsageError) -> click.ClickException:
    """Click's usage error (a bad choice, a missing option, an unknown option or command)
    as the one ``error:`` line, exit 2, in place of click's usage block. A bare command
    that shows its help (``NoArgsIsHelpError``) keeps doing so; ``--help`` is no error."""
    if isinstance(e, getattr(click.exceptions, "NoArgsIsHelpError", ())) or debug():
        return e
    return UserError(e.format_message())


def _one_line(e: ValueError | OSError) -> click.ClickException | None:
    """A cache layout refused (``CacheRefused``: the cache directory is input, exit 2), a
    cache file no layer below reported (``CorruptEntry``, exit 1), another OS error (exit
    1); None for any other ValueError (a bug: its traceback). The cache's types are
    imported here, on the error path, so that ``count`` does not pay for filelock."""
    from wgradcache.cache.store import CacheRefused, CorruptEntry

    if isinstance(e, CacheRefused):
        return UserError(str(e))
    if isinstance(e, CorruptEntry):
        return RunFailed(str(e))
    if isinstance(e, OSError):
        return RunFailed(os_error_line(e))
    return None


def os_error_line(e: OSError) -> str:
    """'<path>: <reason>' (both paths for a rename), or the error's text without a path."""
    where = ": ".join(str(p) for p in (e.filename, e.filename2) if p is not None)
    what = e.strerror or str(e) or type(e).__name__
    return f"{where}: {what}" if where else what


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="wgradcache")
def main() -> None:
    """Build, verify and serve an ahead-of-time cache of AMD GPU wgrad code objects.

    Start with `wgradcache count` (how many jobs the walk yields per target), then
    `wgradcache build --target gfx1250` and `wgradcache verify --from-cache`.
    """


def _default_cache_dir() -> str:
    where = os.environ.get("WGRADCACHE_DIR", "cache")
    if where == "":  # set but empty: not the current directory (gc would evict there)
        raise UserError("--cache-dir: $WGRADCACHE_DIR is set but empty (unset it, or give "
                        "a directory)")
    return where


def cache_dir_option(f):
    return click.option("--cache-dir", type=PathParam("dir"),
                        default=_default_cache_dir, show_default="./cache or $WGRADCACHE_DIR",
                        help="cache root (default: $WGRADCACHE_DIR or ./cache)")(f)


def geometries_option(f):
    # Only an empty path is refused here: the loader says in one line what else is wrong
    # with it (a directory, a FIFO, a device).
    return click.option("--geometries", "geometries_file", type=PathParam("any"),
                        default=None, envvar="WGRADCACHE_GEOMETRIES",
                        help="job data file (default: the shipped geometries.yaml)")(f)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="machine-readable output")(f)


def selection_options(f):
    f = click.option("--variant", "variants", multiple=True, metavar="V", type=VariantParam(),
                     help="k_loop.epilogue.reduction, e.g. async.cshuffle.atomic (repeatable)")(f)
    f = click.option("--dtype", "dtypes", multiple=True, metavar="D", type=DtypeParam(),
                     help="fp16, bf16, fp16_f32 or bf16_f32 (repeatable; default fp16, bf16)")(f)
    f = click.option("--target", "targets", multiple=True, type=TargetParam(), metavar="T",
                     help="gfx1250, gfx1201, gfx1151, gfx950, gfx942 (repeatable; "
                          "default: every target with kernels)")(f)
    return geometries_option(f)


def shard_option(f):
    return click.option("--shard", default=None, metavar="i/n", type=ShardParam(),
                        help="build shard i of n of the sorted job list")(f)


def jobs_option(f):
    return click.option("--jobs", "-j", type=IntParam(1, max_jobs), default=None,
                        help="parallel workers (default: all cores; never more than there "
                             "are jobs)")(f)
