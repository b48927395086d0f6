"""Read and check the timings JSON that ``benchmarks/device_speed.py`` writes on a GPU.

The file comes from another machine and is input like any other: read through the capped
reader (a FIFO, a device or a directory is refused before a byte is read, a file past
``MAX_FILE_BYTES`` is not read whole), parsed with ``NaN``/``Infinity`` and repeated keys
refused, and every field of every row checked before the cover sees it. A cover computed
from a row with a negative or NaN time, a label the tool cannot name, or a geometry the
loader would refuse in a cover block would be a silently wrong ``geometries.yaml``: each
of those is one line ``file: timings[i].field: problem`` instead (exit 2 at the CLI).

Only the ``timings`` rows are used (per (layer, dtype, kernel): the mean milliseconds);
the per-layer ``layers`` rows are the benchmark's own summary and only bounded here.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from wgradcache.files.capped import Refused, read_capped
from wgradcache.files.jsondoc import parse_json
from wgradcache.jobs.geometries import WS_REPLICAS_RANGE, JobData
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import DTYPE_KEYS, REDUCTIONS, from_label
from wgradcache.model.targets import check_target

__all__ = ["TimingsError", "Timing", "Timings", "load_timings", "MAX_FILE_BYTES",
           "MAX_ROWS", "MAX_MS"]

Geometry = tuple[int, int, int, int, int]

# The real file of 46 (layer, dtype) pairs x 12 kernels is 227 KB and 552 rows; the caps
# leave room for every layer set and top-N a benchmark run could time, and no more.
MAX_FILE_BYTES = 16 << 20
MAX_ROWS = 100_000
MAX_MS = 1e6  # a launch of 1000 s is a broken clock, not a kernel time
_LAYER_NAME = re.compile(r"[A-Za-z0-9_.:/+-]{1,100}")  # layers/reference.yaml's names
_ROW_FIELDS = {"layer", "problem", "dtype", "rank", "label", "geometry", "split_k",
               "reduction", "ms", "tflops"}
_REQUIRED = ("layer", "problem", "dtype", "label", "geometry", "split_k", "reduction", "ms")
_MAX_DEGREE = WS_REPLICAS_RANGE[1]  # the split degree's cap (wgrad/split_k.MAX_DEGREE)


class TimingsError(ValueError):
    """One-line refusal of a timings file: ``file: field: problem``."""


@dataclass(frozen=True)
class Timing:
    """One measured kernel on one layer: what the cover needs of a row."""

    layer: str
    dtype: str
    label: str
    geometry: Geometry
    variant: str  # k_loop.epilogue.reduction, from the label
    ms: float
    problem: str = ""  # the layer's N,C,H,W,K,Y,X[,...] (checked: ConvProblem.parse)
    rank: int = 0  # select's rank when the benchmark ran (0: not recorded)


@dataclass(frozen=True)
class Timings:
    path: str
    target: str
    rows: tuple[Timing, ...]


def _shown(path: str) -> str:
    return path if path.isprintable() else repr(path)[1:-1]


def _quote(value: object, limit: int = 60) -> str:
    s = repr(value)
    return s if len(s) <= limit else f"{s[:limit]}... ({len(s)} characters)"


def _read(path: str) -> object:
    where = _shown(path)
    try:
        data = read_capped(path, MAX_FILE_BYTES, follow=True, missing_ok=False)
    except Refused as e:
        if e.code == "os_error":
            raise TimingsError(f"{where}: cannot read: {e.detail}") from None
        if e.code == "kind":
            raise TimingsError(f"{where}: cannot read: {e.detail}, not a regular file") \
                from None
        raise TimingsError(f"{where}: larger than {MAX_FILE_BYTES} bytes (the cap on a "
                           "timings file)") from None
    except ValueError as e:  # an embedded NUL in the path
        raise TimingsError(f"{where}: cannot read: {e}") from None
    return parse_json(data, where, TimingsError)  # type: ignore[arg-type]


def _int(v: object, lo: int, hi: int) -> int | None:
    return v if type(v) is int and lo <= v <= hi else None


def _check_row(row: object, jobs: JobData) -> tuple[str, str] | Timing:
    """The row as a ``Timing``, or (field, problem)."""
    if not isinstance(row, dict):
        return "", f"expected an object, got {type(row).__name__}"
    for k in row:
        if k not in _ROW_FIELDS:
            return "", f"unknown field {_quote(k)}; valid: {', '.join(sorted(_ROW_FIELDS))}"
    for k in _REQUIRED:
        if k not in row:
            return "", f"missing field {k!r}"
    layer = row["layer"]
    if not isinstance(layer, str) or not _LAYER_NAME.fullmatch(layer):
        return "layer", (f"expected a layer name (1 to 100 of A-Z a-z 0-9 _ . : / + -), "
                         f"got {_quote(layer)}")
    if not isinstance(row["problem"], str) or len(row["problem"]) > 200:
        return "problem", f"expected N,C,H,W,K,Y,X[,...] text, got {_quote(row['problem'])}"
    try:
        ConvProblem.parse(row["problem"])
    except ValueError as e:
        return "problem", str(e)
    label = row["label"]
    if not isinstance(label, str) or len(label) > 200:
        return "label", f"expected a kernel label, got {_quote(label)}"
    try:
        spec = from_label(label)
    except ValueError:
        return "label", f"not a kernel label: {_quote(label)}"
    ok, why = check_target(spec.target, kernels=True)
    if not ok:
        return "label", why
    if row["dtype"] not in DTYPE_KEYS or row["dtype"] != spec.dtype_key:
        return "dtype", f"{_quote(row['dtype'])} is not the label's dtype {spec.dtype_key}"
    geom = row["geometry"]
    if not isinstance(geom, list) or [_int(g, 1, 1 << 16) for g in geom] != list(spec.geometry):
        return "geometry", f"{_quote(geom)} is not the label's geometry {list(spec.geometry)}"
    if why := jobs.cover_misfit(spec.target, spec.geometry):
        return "label", f"geometry {list(spec.geometry)} is no cover geometry of {spec.target}" \
                        f" in {jobs.path} ({why})"
    if row["reduction"] not in REDUCTIONS or row["reduction"] != spec.reduction:
        return "reduction", (f"{_quote(row['reduction'])} is not the label's reduction "
                             f"{spec.reduction}")
    if _int(row["split_k"], 1, _MAX_DEGREE) is None:
        return "split_k", f"expected an integer in [1, {_MAX_DEGREE}], got {_quote(row['split_k'])}"
    if "rank" in row and _int(row["rank"], 1, MAX_ROWS) is None:
        return "rank", f"expected an integer in [1, {MAX_ROWS}], got {_quote(row['rank'])}"
    ms = row["ms"]
    if type(ms) not in (int, float) or not (math.isfinite(ms) and 0 < ms <= MAX_MS):
        return "ms", f"expected milliseconds in (0, {MAX_MS:g}], got {_quote(ms)}"
    tf = row.get("tflops", 0.0)
    if type(tf) not in (int, float) or not (math.isfinite(tf) and tf >= 0):
        return "tflops", f"expected a finite number >= 0, got {_quote(tf)}"
    return Timing(layer, row["dtype"], label, spec.geometry, spec.variant, float(ms),
                  row["problem"], row.get("rank", 0))


def load_timings(path: str | os.PathLike, jobs: JobData) -> Timings:
    """The checked rows of one timings file, all of one target; ``TimingsError`` (one line)
    otherwise. ``jobs``: the geometries file whose cover rule every geometry must pass
    (a cover computed from it is written as a block of that file)."""
    path = os.fspath(path)
    where = _shown(path)
    doc = _read(path)
    if not isinstance(doc, dict):
        raise TimingsError(f"{where}: expected a JSON object with 'timings', got "
                           f"{type(doc).__name__}")
    rows = doc.get("timings")
    if not isinstance(rows, list):
        raise TimingsError(f"{where}: timings: expected a list of rows, got "
                           f"{type(rows).__name__ if 'timings' in doc else 'nothing'}")
    if not rows:
        raise TimingsError(f"{where}: timings: no rows (nothing was measured)")
    if len(rows) > MAX_ROWS:
        raise TimingsError(f"{where}: timings: {len(rows)} rows, more than {MAX_ROWS}")
    layers = doc.get("layers", [])
    if not isinstance(layers, list) or len(layers) > MAX_ROWS:
        raise TimingsError(f"{where}: layers: expected a list of at most {MAX_ROWS} rows")
    out: list[Timing] = []
    problems: dict[str, str] = {}
    target = None
    for i, row in enumerate(rows):
        got = _check_row(row, jobs)
        if isinstance(got, tuple):
            field = f"timings[{i}]" + (f".{got[0]}" if got[0] else "")
            raise TimingsError(f"{where}: {field}: {got[1]}")
        t = from_label(got.label).target
        if target is None:
            target = t
        elif t != target:
            raise TimingsError(f"{where}: timings[{i}].label: target {t}, but the rows "
                               f"before are {target} (one target per file)")
        if problems.setdefault(got.layer, row["problem"]) != row["problem"]:
            raise TimingsError(f"{where}: timings[{i}].problem: {row['problem']} for "
                               f"{got.layer}, which rows before give as "
                               f"{problems[got.layer]}")
        out.append(got)
    assert target is not None
    return Timings(path=path, target=target, rows=tuple(out))
