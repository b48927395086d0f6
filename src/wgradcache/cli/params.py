"""The one click parameter type per kind of value a user types, used by every command's
options: a bounded integer, a finite number in a range, timeout seconds, a non-empty path,
a target, a dtype, a variant, a size, a shard, a scheduler address, a problem, a label.

Each refuses a bad value at parse time with one line naming the option (``error: --jobs
'99999': expected an integer in [1, 1024]``, exit 2), before anything runs or is created.
Numbers are ASCII only: Python's ``int()`` and ``float()`` also take full-width digits
('１２'), underscores ('1_0') and 'nan'/'inf', none of which a user means as a count.
The library owns the rules it already has (target names, dtypes, variants, sizes, shards,
problems, labels); these types only call them, importing them inside ``convert`` so that
``wgradcache count`` does not pay for them.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable

import click

from wgradcache.cli.console import UserError

__all__ = ["RegexParam", "IntParam", "FloatParam", "SecondsParam", "PathParam", "TargetParam",
           "DtypeParam", "VariantParam", "SizeParam", "ShardParam", "SchedulerParam",
           "ProblemParam", "LabelParam", "MAX_SEED", "max_jobs"]

MAX_SEED = 2**32 - 1  # numpy's SeedSequence takes no negative seed (-1 was a traceback)

_INT = re.compile(r"[+-]?[0-9]{1,30}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,3})?")
# tcp://HOST:PORT, tls:// or ucx:// too, or HOST:PORT (dask's default tcp)
_SCHEDULER = re.compile(r"(?:(?:tcp|tls|ucx)://)?(?:[A-Za-z0-9][A-Za-z0-9.-]{0,252}"
                        r"|\[[0-9A-Fa-f:.]{2,45}\]):([0-9]{1,5})")

Bound = float | int | Callable[[], float | int]


def name_of(param: click.Parameter | None) -> str:
    """How an error names the parameter: its first option (--jobs), an argument's metavar."""
    if param is None:
        return "value"
    if isinstance(param, click.Option):
        return param.opts[0]
    return param.human_readable_name


def shown(value) -> str:
    """The value as the error quotes it: repr, cut to 40 characters."""
    text = value if isinstance(value, str) else str(value)
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}..."


def refuse(param: click.Parameter | None, why: str) -> UserError:
    return UserError(f"{name_of(param)}: {why}")


def max_jobs() -> int:
    from wgradcache.pipeline.plan import MAX_JOBS

    return MAX_JOBS


def _timeout_range(i: int) -> Callable[[], float]:
    def bound() -> float:
        from wgradcache.pipeline.plan import JOB_TIMEOUT_RANGE

        return JOB_TIMEOUT_RANGE[i]
    return bound


def _bound(b: Bound) -> float | int:
    """A bound given as a number, or as a function that imports the library's constant
    (resolved when a value is checked, not when the command is declared)."""
    return b() if callable(b) else b


class IntParam(click.ParamType):
    """An integer of ASCII digits in [lo, hi] (either bound may be a function)."""

    name = "integer"

    def __init__(self, lo: Bound, hi: Bound):
        self.lo, self.hi = lo, hi

    def convert(self, value, param, ctx):
        lo, hi = _bound(self.lo), _bound(self.hi)
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and _INT.fullmatch(value.strip()):
            number = int(value.strip())
        else:
            number = None
        if number is None or not lo <= number <= hi:
            raise UserError(f"{name_of(param)} {shown(value)}: expected an integer in "
                            f"[{lo}, {hi}]")
        return number


class FloatParam(click.ParamType):
    """A finite number of ASCII digits in [lo, hi], or (lo, hi] with ``lo_open``: never
    nan, inf or an overflow to inf ('1e999')."""

    name = "number"

    def __init__(self, lo: Bound, hi: Bound, lo_open: bool = False):
        self.lo, self.hi, self.lo_open = lo, hi, lo_open

    def convert(self, value, param, ctx):
        lo, hi = _bound(self.lo), _bound(self.hi)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
            number = float(value.strip())
        else:
            number = math.nan
        above_lo = number > lo if self.lo_open else number >= lo
        if not (math.isfinite(number) and above_lo and number <= hi):
            raise UserError(f"{name_of(param)} {shown(value)}: expected a finite number in "
                            f"{'(' if self.lo_open else '['}{lo:g}, {hi:g}]")
        return number


class SecondsParam(FloatParam):
    """A timeout: finite seconds in ``pipeline.plan.JOB_TIMEOUT_RANGE`` (1 s to a day)."""

    name = "seconds"

    def __init__(self):
        super().__init__(_timeout_range(0), _timeout_range(1))


class PathParam(click.ParamType):
    """A path option: ``kind="file"`` (a file to read or write: a directory there is
    refused), ``kind="dir"`` (a directory to use or create: a file there is refused) or
    ``kind="any"`` (the reader judges what is there). Never empty: '' would silently mean
    the current directory (gc would evict there, merge write there). What ``click.Path``
    checks, in one line (``error: --plan DIR: a directory, not a file``, exit 2) instead of
    click's usage block. A path that does not exist, or is something else (a FIFO, a
    device), is the command's to judge: its reader says what it is in one line."""

    name = "path"

    def __init__(self, kind: str):
        assert kind in ("file", "dir", "any")
        self.kind = kind

    def convert(self, value, param, ctx):
        import stat

        text = os.fspath(value)
        opt = name_of(param)
        if text == "":
            raise UserError(f"{opt}: an empty path (give one; '' is not the current "
                            "directory)")
        if "\0" in text:
            raise UserError(f"{opt} {shown(text)}: a path cannot hold a NUL byte")
        if self.kind == "any":
            return text
        try:
            mode = os.stat(text).st_mode
        except (OSError, ValueError):  # absent, a loop, unreadable: the reader's line says
            return text
        if self.kind == "file" and stat.S_ISDIR(mode):
            raise UserError(f"{opt} {text}: a directory, not a file")
        if self.kind == "dir" and stat.S_ISREG(mode):
            raise UserError(f"{opt} {text}: a file, not a directory")
        return text


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
            raise refuse(param, why)
        return value


class _OneOf(click.ParamType):
    """One of a library table's names (imported when a value is checked)."""

    kind = ""

    def valid(self) -> tuple[str, ...]:
        raise NotImplementedError

    def convert(self, value, param, ctx):
        valid = self.valid()
        if value not in valid:
            raise refuse(param, f"unknown {self.kind} {shown(value)}; valid: "
                                f"{', '.join(valid)}")
        return value


class DtypeParam(_OneOf):
    """fp16, bf16, fp16_f32, bf16_f32 (``model.spec.DTYPE_KEYS``)."""

    name = kind = "dtype"

    def valid(self):
        from wgradcache.model.spec import DTYPE_KEYS

        return DTYPE_KEYS


class VariantParam(_OneOf):
    """k_loop.epilogue.reduction (``model.spec.VARIANT_KEYS``)."""

    name = kind = "variant"

    def valid(self):
        from wgradcache.model.spec import VARIANT_KEYS

        return VARIANT_KEYS


class SizeParam(click.ParamType):
    """'500M', '2G' -> bytes (``cache.gc.parse_size``); '' is not a size."""

    name = "size"

    def convert(self, value, param, ctx):
        from wgradcache.cache.gc import parse_size

        if isinstance(value, int):
            return value
        try:
            return parse_size(value)
        except ValueError as e:
            raise refuse(param, str(e)) from None


class ShardParam(click.ParamType):
    """'i/n' -> (i, n) (``pipeline.plan.parse_shard``); '' is not a shard."""

    name = "shard"

    def convert(self, value, param, ctx):
        from wgradcache.pipeline.plan import parse_shard

        if isinstance(value, tuple):
            return value
        try:
            return parse_shard(value)
        except ValueError as e:
            raise refuse(param, str(e)) from None


class SchedulerParam(click.ParamType):
    """A dask scheduler address, [tcp|tls|ucx://]HOST:PORT: anything else was distributed's
    traceback."""

    name = "address"

    def convert(self, value, param, ctx):
        m = _SCHEDULER.fullmatch(value) if value.isascii() else None
        if m is None or not 1 <= int(m.group(1)) <= 65535:
            raise refuse(param, f"{shown(value)} is not tcp://HOST:PORT (or tls://, "
                                "ucx://; port 1 to 65535)")
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
            raise UserError(f"{name_of(param)} {value}: {e}") from None


class RegexParam(click.ParamType):
    """A regular expression (Python's ``re``), checked at parse time: a bad one is one line,
    exit 2 (``verify --label``)."""

    name = "regex"

    def convert(self, value, param, ctx):
        import re

        try:
            re.compile(value)
        except re.error as e:
            raise refuse(param, f"{shown(value)} is not a regular expression: {e}") from None
        return value


class LabelParam(click.ParamType):
    """A kernel label -> KernelSpec."""

    name = "label"

    def convert(self, value, param, ctx):
        from wgradcache.model.spec import from_label

        try:
            return from_label(value)
        except ValueError as e:
            raise refuse(param, str(e)) from None
