"""The click group, the options every command shares, and the one check of each kind of
value a user types (a target, a problem, a label) so that no command restates it.

Bad values fail at parse time with one line (``error: ...``, not click's usage block) and
exit 2, click's own usage errors too (a bad choice, a missing option: ``_usage_line``);
library errors about user input or set-up become the same one line (``_Group.invoke``).
"""

from __future__ import annotations

import os

import click

from wgradcache.cli.console import RunFailed, UserError, debug

__all__ = ["main", "cache_dir_option", "geometries_option", "selection_options",
           "json_option", "shard_option", "TargetParam", "ProblemParam", "LabelParam", "RegexParam",
           "PathParam"]


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


class TargetParam(click.ParamType):
    """A target of the catalog; ``kernels=True`` also needs a kernel generator for it.

    The one place a typed target name is checked: build, verify, select, gc, ls all use it.
    """

    name = "target"

    def __init__(self, kernels: bool = False):
        self.kernels = kernels

    def convert(self, value, param, ctx):
        from wgradcache.model.targets import check_target

        ok, why = check_target(value, kernels=self.kernels)
        if not ok:
            raise UserError(why)
        return value


class RegexParam(click.ParamType):
    """A regular expression (Python's ``re``), checked here: a bad one is one line, exit 2."""

    name = "regex"

    def convert(self, value, param, ctx):
        import re

        try:
            re.compile(value)
        except re.error as e:
            raise UserError(f"--{param.name if param else 'regex'}: {value!r} is not a "
                            f"regular expression: {e}") from None
        return value


class ProblemParam(click.ParamType):
    """N,C,H,W,K,Y,X[,stride,pad,dilation,groups] -> ConvProblem."""

    name = "problem"

    def convert(self, value, param, ctx):
        from wgradcache.model.problem import ConvProblem

        if isinstance(value, ConvProblem):
            return value
        try:
            return ConvProblem.parse(value)
        except ValueError as e:
            raise UserError(f"{param.opts[0] if param else 'problem'} {value}: {e}") from None


class LabelParam(click.ParamType):
    """A kernel label -> KernelSpec."""

    name = "label"

    def convert(self, value, param, ctx):
        from wgradcache.model.spec import from_label

        try:
            return from_label(value)
        except ValueError as e:
            raise UserError(str(e)) from None


class PathParam(click.ParamType):
    """A path option: ``kind="file"`` (a file to read or write: a directory there is
    refused) or ``kind="dir"`` (a directory to use or create: a file there is refused).
    What ``click.Path`` checks, in one line (``error: --plan DIR: a directory, not a
    file``, exit 2) instead of click's usage block. A path that does not exist, or is
    something else (a FIFO, a device), is the command's to judge: its reader says what it
    is in one line."""

    name = "path"

    def __init__(self, kind: str):
        assert kind in ("file", "dir")
        self.kind = kind

    def convert(self, value, param, ctx):
        import stat

        text = os.fspath(value)
        opt = param.opts[0] if param else "path"
        try:
            mode = os.stat(text).st_mode
        except OSError:  # absent, a symlink loop, unreadable: the reader's line says which
            return text
        except ValueError as e:  # an embedded NUL
            raise UserError(f"{opt} {text!r}: {e}") from None
        if self.kind == "file" and stat.S_ISDIR(mode):
            raise UserError(f"{opt} {text}: a directory, not a file")
        if self.kind == "dir" and stat.S_ISREG(mode):
            raise UserError(f"{opt} {text}: a file, not a directory")
        return text


def _default_cache_dir() -> str:
    return os.environ.get("WGRADCACHE_DIR", "cache")


def cache_dir_option(f):
    return click.option("--cache-dir", type=PathParam("dir"),
                        default=_default_cache_dir, show_default="./cache or $WGRADCACHE_DIR",
                        help="cache root (default: $WGRADCACHE_DIR or ./cache)")(f)


def geometries_option(f):
    # A plain path: the loader says in one line what is wrong with it (a directory, a FIFO,
    # a device), where click.Path's check prints the usage block.
    return click.option("--geometries", "geometries_file", type=click.Path(),
                        default=None, envvar="WGRADCACHE_GEOMETRIES",
                        help="job data file (default: the shipped geometries.yaml)")(f)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="machine-readable output")(f)


def selection_options(f):
    f = click.option("--variant", "variants", multiple=True, metavar="V",
                     help="k_loop.epilogue.reduction, e.g. async.cshuffle.atomic (repeatable)")(f)
    f = click.option("--dtype", "dtypes", multiple=True, metavar="D",
                     help="fp16, bf16, fp16_f32 or bf16_f32 (repeatable; default fp16, bf16)")(f)
    f = click.option("--target", "targets", multiple=True, type=TargetParam(), metavar="T",
                     help="gfx1250, gfx1201, gfx1151, gfx950, gfx942 (repeatable; "
                          "default: every target with kernels)")(f)
    return geometries_option(f)


def _shard(ctx, param, value):
    from wgradcache.pipeline.build import parse_shard

    try:
        return parse_shard(value) if value else None
    except ValueError as e:
        raise UserError(str(e)) from None


def shard_option(f):
    return click.option("--shard", default=None, metavar="i/n", callback=_shard,
                        help="build shard i of n of the sorted job list")(f)
