"""One JSON document read from outside bytes: UTF-8, finite numbers, no repeated keys, not
nested past the interpreter's limit; every refusal one line naming the file.

The two readers of timings files (``jobs.timings`` for ``cover --timings``,
``pipeline.timing_import`` for ``tune --import``) parse with this; each reads its bytes
its own way (links followed or not, its own cap) and raises its own error type.
"""

from __future__ import annotations

import json

__all__ = ["parse_json"]


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number this file may hold")


def _quote(value: object, limit: int = 40) -> str:
    s = repr(value)
    return s if len(s) <= limit else f"{s[:limit]}... ({len(s)} characters)"


def _no_repeats(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"repeated key {_quote(k)}")
        out[k] = v
    return out


def parse_json(data: bytes, where: str, error: type[Exception]) -> object:
    """The document in ``data``; ``error("<where>...: <why>")`` when it is not one."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{where}: not UTF-8 (offset {e.start})") from None
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_no_repeats)
    except json.JSONDecodeError as e:
        raise error(f"{where}:{e.lineno}: not valid JSON: {e.msg}") from None
    except RecursionError:
        raise error(f"{where}: not valid JSON: nested too deep") from None
    except ValueError as e:  # NaN, a repeated key, an integer of too many digits
        raise error(f"{where}: not valid JSON: {e}") from None
