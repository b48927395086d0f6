"""Measured kernel times kept with the cache: one file per device class, one reader/writer.

    <root>/<target>/timings/<class slug>.json

A *device class* is what makes two devices time a kernel alike: the device's name, its
SM/CU count and the driver and runtime versions (``DeviceClass``). Its file name is
``DeviceClass.slug()``: the name folded to ``[a-z0-9-]`` (at most 40 characters) and the
first 12 hex digits of the sha256 of the whole class, so two classes never share a file
and no text taken from input becomes a path (the store builds the path from a checked
slug only, ``is_slug``).

A file (``TimingsFile``) holds the class, its rows and the fit of the cost model to them:

* ``TimingRow``: one (kernel identity key, blob key, problem, dtype, split degree) with
  the median milliseconds of its launches, their spread (max - min, ms), how many were
  timed and when. A row is the time of the *blob* it names: once the entry's blob key is
  another (the kernel was rebuilt from other IR or by another toolchain), the row is
  stale and nothing reads it as the kernel's time (``row_is_current``);
* ``VendorRow``: the vendor library's time on a (problem, dtype) (cuDNN, MIOpen), beside;
* ``Fit``: the cost model's constants fitted to the rows, its residual and what it was
  fitted on (rows, kernels, problems, and a digest of the rows), or none.

The file is input like every cache file (copied between machines, imported from a device
run): the reader checks UTF-8, finite JSON, every field's type, no field it does not know,
keys of 64 hex digits, times finite and in (0, ``MAX_MS``], counts bounded, the row count
at most ``MAX_ROWS`` (checked before any row is), the file at most ``MAX_TIMINGS_FILE``
bytes (the store's capped read). A file that fails is ``CorruptEntry``: one line naming
it and the first reason.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field

from wgradcache.cache.entry import CorruptEntry, is_key, parse_object

__all__ = ["DeviceClass", "TimingRow", "VendorRow", "Fit", "TimingsFile", "read_timings",
           "timings_bytes", "timings_json", "check_timings_doc", "BadTimings", "merge_files",
           "is_slug", "row_key", "merge_rows", "over_cap", "row_is_current", "FACTOR_RANGE",
           "MAX_ROWS", "MAX_MS", "MAX_TIMINGS_FILE", "MAX_ITERATIONS"]

MAX_ROWS = 200_000
"""Rows of one class: ``tune --all`` over the ~46 distinct layers of ``layers/reference.yaml``
in two dtypes times a few hundred serving kernels each is ~30 000; room for four dtypes and
the stale rows of a few rebuilds (gc drops those)."""
MAX_TIMINGS_FILE = 96 << 20
"""A row is ~330 bytes written: ``MAX_ROWS`` of them and the vendor rows fit."""
MAX_MS = 1e6  # a launch of 1000 s is a broken clock, not a kernel time
MAX_ITERATIONS = 1_000_000
MAX_CONSTANTS = 32
FACTOR_RANGE = (1e-3, 1e3)
"""A kernel's factor over the fit: outside this the fit or the rows are broken, not slow."""
_SLUG = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,52})-[0-9a-f]{12}")
# A device's name as drivers report it ("NVIDIA H100 80GB HBM3", "AMD Instinct MI300X"): no
# path separator, no control character.
_NAME = re.compile(r"[A-Za-z0-9 ._()+-]{1,100}")
_VERSION = re.compile(r"[A-Za-z0-9._+-]{0,40}")
_TIMING = re.compile(r"(graph)?")
_PROBLEM = re.compile(r"[0-9]{1,9}(?:,[0-9]{1,9}){6,10}")
_DTYPE = re.compile(r"[a-z0-9_]{1,16}")
_LIBRARY = re.compile(r"[a-z0-9_.-]{1,40}")
_MAX_DEGREE = 65535  # gridDim.z: no launch splits further


def is_slug(value: object) -> bool:
    """A device class's file stem as ``DeviceClass.slug`` makes it, nothing else."""
    return isinstance(value, str) and _SLUG.fullmatch(value) is not None


@dataclass(frozen=True)
class DeviceClass:
    """What makes two devices time a kernel alike. ``sm_count`` 0 and empty versions: not
    known (a benchmark file that named only the device). ``timing``: how the rows were
    timed (``runtime/timing.TIMING``); "" for events around launches from the host, the
    method before 2026-12-07, which times the host for a kernel shorter than its launch:
    such rows are another class's, not ranked beside graph-replayed ones."""

    name: str
    sm_count: int
    driver: str
    runtime: str
    timing: str = ""

    def as_dict(self) -> dict:
        """The stored form: ``timing`` only where it is set, so a class of the earlier
        method keeps its file name (``slug``) and its file's bytes."""
        d = asdict(self)
        if not self.timing:
            del d["timing"]
        return d

    def slug(self) -> str:
        """``nvidia-h100-80gb-hbm3-<12 hex digits of the class's sha256>``."""
        fold = re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")[:40].strip("-")
        digest = hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode())
        return f"{fold or 'device'}-{digest.hexdigest()[:12]}"

    def describe(self) -> str:
        sms = f"{self.sm_count} SMs/CUs" if self.sm_count else "SM count not known"
        ver = ", ".join(f"{k} {v}" for k, v in (("driver", self.driver),
                                                ("runtime", self.runtime)) if v)
        how = "graph replay" if self.timing else "timed from the host"  # the only two
        return f"{self.name} ({sms}{', ' + ver if ver else ''}; {how})"


@dataclass(frozen=True)
class TimingRow:
    identity_key: str
    blob: str  # the content key of the code object that was timed
    problem: str  # ConvProblem.short()
    dtype: str
    degree: int
    median_ms: float
    spread_ms: float  # max - min of the timed launches
    iterations: int
    when: float  # time.time() of the measurement


@dataclass(frozen=True)
class VendorRow:
    library: str  # "cudnn", "miopen"
    problem: str
    dtype: str
    median_ms: float
    spread_ms: float
    iterations: int
    when: float


@dataclass(frozen=True)
class Fit:
    """The cost model's constants (``pipeline/fit.py`` names them) fitted to a class's
    current rows by least squares; ``residual``: the RMS of (fitted - measured) / measured
    over those rows; ``rows``/``kernels``/``problems``: what it was fitted on, ``digest``:
    the sha256 of their keys and times (a refit on the same rows gives the same digest)."""

    constants: dict[str, float]
    residual: float
    rows: int
    kernels: int
    problems: int
    digest: str
    when: float
    # identity key -> the geometric mean of measured / fitted over that kernel's rows: what
    # the model's terms miss of one kernel (its code's own speed) carried to the problems it
    # was not timed on. Absent in files of before 2026-12-07: none.
    factors: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TimingsFile:
    device: DeviceClass
    rows: tuple[TimingRow, ...] = ()
    vendor: tuple[VendorRow, ...] = ()
    fit: Fit | None = None


def row_key(row: TimingRow) -> tuple[str, str, str, str, int]:
    """What one row measures: a second row of the same key replaces it (the newer wins)."""
    return (row.identity_key, row.blob, row.problem, row.dtype, row.degree)


def row_is_current(row: TimingRow, blob_of: dict[str, str]) -> bool:
    """Whether ``row`` times the blob its kernel has now (``blob_of``: identity key -> the
    entry's blob key): a row of a removed kernel or of an older blob is not."""
    return blob_of.get(row.identity_key) == row.blob


def merge_rows(old: tuple, new: tuple, key=row_key) -> tuple:
    """The union of two row sets; of two rows with one key the newer (``when``) is kept,
    ``new``'s on a tie. Sorted by key, so a merge in either order writes the same bytes."""
    out = {key(r): r for r in old}
    for r in new:
        have = out.get(key(r))
        if have is None or r.when >= have.when:
            out[key(r)] = r
    return tuple(out[k] for k in sorted(out))


def _vendor_key(row: VendorRow) -> tuple[str, str, str]:
    return (row.library, row.problem, row.dtype)


def over_cap(tf: TimingsFile) -> str:
    """Why ``tf`` cannot be written (more rows than its reader takes), or ""."""
    for name, rows in (("rows", tf.rows), ("vendor rows", tf.vendor)):
        if len(rows) > MAX_ROWS:
            return (f"{len(rows)} {name} for {tf.device.slug()}, more than {MAX_ROWS} "
                    "(`wgradcache gc` drops the stale ones)")
    return ""


def merge_files(old: TimingsFile, new: TimingsFile) -> TimingsFile:
    """``new``'s rows and vendor rows into ``old`` (``merge_rows``); the newer fit is kept
    (a fit describes the rows it was fitted on, which its ``digest`` names)."""
    fits = [f for f in (old.fit, new.fit) if f is not None]
    return TimingsFile(old.device, merge_rows(old.rows, new.rows),
                       merge_rows(old.vendor, new.vendor, _vendor_key),
                       max(fits, key=lambda f: f.when) if fits else None)


# -- the reader ---------------------------------------------------------------------------
class BadTimings(ValueError):
    """Why a timings document is refused (no file named: the caller words the line)."""


def _obj(v, fields_: dict[str, object], where: str) -> dict:
    if type(v) is not dict:
        raise BadTimings(f"{where}: {type(v).__name__}, not an object")
    for k in v:
        if k not in fields_:
            raise BadTimings(f"{where}: unknown field {str(k)[:40]!r}")
    for k in fields_:
        if k not in v:
            raise BadTimings(f"{where}: no field {k!r}")
    return v


def _str(v, pattern: re.Pattern, where: str, what: str) -> str:
    if type(v) is not str or not pattern.fullmatch(v):
        raise BadTimings(f"{where}: {str(v)[:40]!r} is not {what}")
    return v


def _int(v, lo: int, hi: int, where: str) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise BadTimings(f"{where}: {str(v)[:40]} is not an integer in [{lo}, {hi}]")
    return v


def _num(v, where: str, lo: float = 0.0, hi: float = MAX_MS, open_lo: bool = True) -> float:
    ok = type(v) in (int, float) and math.isfinite(v) and v <= hi and (
        v > lo if open_lo else v >= lo)
    if not ok:
        span = f"({lo:g}, {hi:g}]" if open_lo else f"[{lo:g}, {hi:g}]"
        raise BadTimings(f"{where}: {str(v)[:40]} is not a number in {span}")
    return float(v)


def _key(v, where: str) -> str:
    if not is_key(v):
        raise BadTimings(f"{where}: {str(v)[:40]!r} is not a key (64 hex digits)")
    return v


_WHEN_MAX = 1e11  # seconds since 1970: year 5138


def _device(v, where: str) -> DeviceClass:
    if type(v) is dict and "timing" not in v:
        v = {**v, "timing": ""}  # a class of the earlier method
    d = _obj(v, {"name": 0, "sm_count": 0, "driver": 0, "runtime": 0, "timing": 0}, where)
    return DeviceClass(_str(d["name"], _NAME, f"{where}.name",
                            "a device name (1 to 100 of A-Z a-z 0-9 space . _ ( ) + -)"),
                       _int(d["sm_count"], 0, 100_000, f"{where}.sm_count"),
                       _str(d["driver"], _VERSION, f"{where}.driver", "a version"),
                       _str(d["runtime"], _VERSION, f"{where}.runtime", "a version"),
                       _str(d["timing"], _TIMING, f"{where}.timing", "a timing method "
                            "(graph, or empty)"))


def _problem(v, where: str, seen: dict[str, str]) -> str:
    """A problem in ``ConvProblem.short`` form (``seen``: the ones already proven)."""
    text = _str(v, _PROBLEM, where, "a problem N,C,H,W,K,Y,X[,...]")
    if text not in seen:
        from wgradcache.model.problem import ConvProblem

        try:
            short = ConvProblem.parse(text).short()
        except ValueError as e:
            raise BadTimings(f"{where}: {e}") from None
        if short != text:
            raise BadTimings(f"{where}: {text} is not in its short form {short}")
        seen[text] = short
    return text


def _row(v, where: str, seen: dict[str, str]) -> TimingRow:
    r = _obj(v, {f: 0 for f in TimingRow.__dataclass_fields__}, where)
    return TimingRow(_key(r["identity_key"], f"{where}.identity_key"),
                     _key(r["blob"], f"{where}.blob"),
                     _problem(r["problem"], f"{where}.problem", seen),
                     _str(r["dtype"], _DTYPE, f"{where}.dtype", "a dtype"),
                     _int(r["degree"], 1, _MAX_DEGREE, f"{where}.degree"),
                     _num(r["median_ms"], f"{where}.median_ms"),
                     _num(r["spread_ms"], f"{where}.spread_ms", open_lo=False),
                     _int(r["iterations"], 1, MAX_ITERATIONS, f"{where}.iterations"),
                     _num(r["when"], f"{where}.when", hi=_WHEN_MAX))


def _vendor(v, where: str, seen: dict[str, str]) -> VendorRow:
    r = _obj(v, {f: 0 for f in VendorRow.__dataclass_fields__}, where)
    return VendorRow(_str(r["library"], _LIBRARY, f"{where}.library", "a library name"),
                     _problem(r["problem"], f"{where}.problem", seen),
                     _str(r["dtype"], _DTYPE, f"{where}.dtype", "a dtype"),
                     _num(r["median_ms"], f"{where}.median_ms"),
                     _num(r["spread_ms"], f"{where}.spread_ms", open_lo=False),
                     _int(r["iterations"], 1, MAX_ITERATIONS, f"{where}.iterations"),
                     _num(r["when"], f"{where}.when", hi=_WHEN_MAX))


def _fit(v, where: str) -> Fit | None:
    if v is None:
        return None
    if type(v) is dict and "factors" not in v:
        v = {**v, "factors": {}}  # a fit written before the factors
    f = _obj(v, {n: 0 for n in Fit.__dataclass_fields__}, where)
    consts = f["constants"]
    if type(consts) is not dict or not 0 < len(consts) <= MAX_CONSTANTS:
        raise BadTimings(f"{where}.constants: not an object of 1 to {MAX_CONSTANTS} numbers")
    out = {}
    for k, c in consts.items():
        name = _str(k, _DTYPE, f"{where}.constants", "a constant's name")
        if type(c) not in (int, float) or not math.isfinite(c) or abs(c) > 1e12:
            raise BadTimings(f"{where}.constants.{name}: {str(c)[:40]} is not a finite number")
        out[name] = float(c)
    return Fit(out, _num(f["residual"], f"{where}.residual", hi=1e6, open_lo=False),
               _int(f["rows"], 1, MAX_ROWS, f"{where}.rows"),
               _int(f["kernels"], 1, MAX_ROWS, f"{where}.kernels"),
               _int(f["problems"], 1, MAX_ROWS, f"{where}.problems"),
               _key(f["digest"], f"{where}.digest"),
               _num(f["when"], f"{where}.when", hi=_WHEN_MAX),
               _factors(f["factors"], f"{where}.factors"))


def _factors(v, where: str) -> dict[str, float]:
    if type(v) is not dict or len(v) > MAX_ROWS:
        raise BadTimings(f"{where}: not an object of at most {MAX_ROWS} kernels")
    return {_key(k, where): _num(f, f"{where}.{k[:12]}", lo=FACTOR_RANGE[0],
                                 hi=FACTOR_RANGE[1], open_lo=False)
            for k, f in v.items()}


_TOP = {"device": 0, "rows": 0, "vendor": 0, "fit": 0}


def check_timings_doc(doc: object, extra: tuple[str, ...] = (),
                      unique: bool = True) -> TimingsFile:
    """The ``TimingsFile`` a parsed JSON document holds; ``BadTimings`` (a ValueError's
    reason) otherwise. ``extra``: top-level fields a caller reads itself (``tune --json``'s
    ``target``); ``unique``: refuse two rows of one key (off for rows whose keys the
    caller fills in later). The row count is checked before any row."""
    d = _obj(doc, {**_TOP, **dict.fromkeys(extra, 0)}, "file") if extra else \
        _obj(doc, _TOP, "file")
    device = _device(d["device"], "device")
    rows, vendor = d["rows"], d["vendor"]
    for name, v in (("rows", rows), ("vendor", vendor)):
        if type(v) is not list:
            raise BadTimings(f"{name}: {type(v).__name__}, not a list")
        if len(v) > MAX_ROWS:
            raise BadTimings(f"{name}: {len(v)} rows, more than {MAX_ROWS}")
    problems: dict[str, str] = {}
    got = tuple(_row(r, f"rows[{i}]", problems) for i, r in enumerate(rows))
    seen: set = set()
    for i, r in enumerate(got if unique else ()):
        if row_key(r) in seen:
            raise BadTimings(f"rows[{i}]: a second row of the same kernel, blob, problem, dtype "
                       "and degree")
        seen.add(row_key(r))
    return TimingsFile(device, got, tuple(_vendor(r, f"vendor[{i}]", problems)
                                          for i, r in enumerate(vendor)),
                       _fit(d["fit"], "fit"))


def read_timings(data: bytes | str, where: str) -> TimingsFile:
    """The timings file in ``data`` (``where`` names it); CorruptEntry (one line) otherwise."""
    doc = parse_object(data, where)
    try:
        return check_timings_doc(doc)
    except BadTimings as e:
        raise CorruptEntry(f"{where}: corrupt: {e}") from None


def timings_json(tf: TimingsFile) -> dict:
    return {"device": tf.device.as_dict(), "rows": [asdict(r) for r in tf.rows],
            "vendor": [asdict(r) for r in tf.vendor],
            "fit": None if tf.fit is None else asdict(tf.fit)}


def timings_bytes(tf: TimingsFile) -> bytes:
    """The writer: compact JSON, sorted keys (as ``entry.record_bytes``)."""
    return json.dumps(timings_json(tf), sort_keys=True, separators=(",", ":")).encode()

