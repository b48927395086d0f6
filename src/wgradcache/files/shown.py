"""Text from outside input shown to people, one line whatever it holds.

Labels, reasons and keys printed for people can come from a cache directory or a previous
report, which are input: a newline there would forge a line of our output (a GitHub
``::error::`` annotation), an escape code would drive the terminal. The bottom layer, so
that the CLI's console and the reports a pipeline writes escape with the same function.
"""

from __future__ import annotations

from typing import Any

__all__ = ["printable"]


def printable(value: Any) -> str:
    """``str(value)`` with every non-printable character escaped (``\\n``, ``\\x1b``)."""
    s = str(value)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in s)
