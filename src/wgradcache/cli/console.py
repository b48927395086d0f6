"""The one console wrapper every command renders through: rich tables for people, JSON for
machines, one-line errors for both.

Kept apart from the commands so each stays a parse, one library call and one render.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

import click

from wgradcache.files.shown import printable  # the one escape, shared with the reports

__all__ = ["UserError", "RunFailed", "emit_json", "table", "console", "progress",
           "ProgressHook", "debug", "printable"]


class UserError(click.ClickException):
    """Bad input: one line on stderr, exit code 2."""

    exit_code = 2

    def show(self, file=None) -> None:  # noqa: D102 - click API
        click.echo(f"error: {printable(self.format_message())}", err=True)


class RunFailed(click.ClickException):
    """The run itself failed (a job, a check): one line, exit code 1."""

    exit_code = 1

    def show(self, file=None) -> None:  # noqa: D102 - click API
        click.echo(f"failed: {printable(self.format_message())}", err=True)


def debug() -> bool:
    return bool(os.environ.get("WGRADCACHE_DEBUG"))


def console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Off a terminal (pipes, CI logs, CliRunner) rich would wrap at 80 columns and cut labels.
    width = None if stream.isatty() else 200
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


def emit_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]],
          numeric_from: int = 1) -> None:
    """A rich table; cells and title are plain text (never rich markup) and printable."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(printable(title)), title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="right" if i >= numeric_from else "left")
    for r in rows:
        t.add_row(*(Text(printable(x)) for x in r))
    console().print(t)


class progress:  # noqa: N801 - used as a context manager like rich's
    """A rich progress bar (done/total, rate, ETA) on stderr; off when not a terminal.

    ``with progress(total, "build") as advance: advance(1)``. With ``work_total`` the bar and
    the ETA follow work units (``advance(1, work=cost)``) while the count and the rate stay
    in items: a build runs its longest jobs first, so an ETA by job count starts far too long.
    """

    def __init__(self, total: int, description: str, enabled: bool = True,
                 work_total: float | None = None):
        from rich.progress import (
            BarColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._p = Progress(
            TextColumn("{task.description}"), BarColumn(),
            TextColumn("{task.fields[done]}/{task.fields[items]}"),
            TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
            console=console(stderr=True),
            disable=not enabled or not sys.stderr.isatty(), transient=False)
        self._total, self._description = total, description
        self._work_total = work_total
        self._done = 0
        self._started = self._rate_at = 0.0

    def __enter__(self):
        self._p.start()
        self._started = time.monotonic()
        total = self._total if self._work_total is None else self._work_total
        self._task = self._p.add_task(self._description, total=total, rate="", done=0,
                                      items=self._total)
        return self.advance

    def advance(self, n: int = 1, work: float | None = None) -> None:
        self._done += n
        step = n if self._work_total is None else (work if work is not None else 0.0)
        # Fields are refreshed at most twice a second: thousands of quick advances (a
        # no-op rebuild) must not each pay for a re-render or a rate.
        now = time.monotonic()
        if self._p.disable:
            return
        if now - self._rate_at < 0.5 and self._done < self._total:
            self._p.advance(self._task, step)
            return
        self._rate_at = now
        rate = self._done / max(now - self._started, 1e-9)
        self._p.update(self._task, advance=step, done=self._done, rate=f"{rate:.1f}/s")

    def __exit__(self, *exc) -> None:
        self._p.stop()


class ProgressHook:
    """The callbacks a long library call reports through, when it learns its total late.

    ``on_total(n, work)`` starts a ``progress`` bar, ``advance(n, work)`` moves it (nothing
    before the total is known), leaving the ``with`` block stops it: build and verify both
    plan first and only then know how much is left.
    """

    def __init__(self, description: str, enabled: bool = True):
        self._description, self._enabled = description, enabled
        self._bar: progress | None = None

    def on_total(self, n: int, work: float | None = None) -> None:
        self._bar = progress(n, self._description, enabled=self._enabled, work_total=work)
        self._bar.__enter__()

    def advance(self, n: int = 1, work: float | None = None) -> None:
        if self._bar is not None:
            self._bar.advance(n, work)

    def __enter__(self) -> ProgressHook:
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
