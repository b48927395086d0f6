"""``wgradcache tune --import FILE``: timings measured on another machine, checked against
this cache row by row, then merged into its device class's file; all or nothing.

This is how the build machine, which has no GPU, gets the device's measurements. Two forms:

* ``tune --json``'s output: ``{"target", "device", "rows", "vendor", "fit"}`` (and its
  ``failures`` and ``refit`` lines and its counts of what was left, checked and not
  kept), the rows as ``cache/timings.py`` writes them (identity key and blob key of each kernel);
* ``benchmarks/device_speed.py --out``: ``{"device": "sm_90 device 0 (<name>)", "iters",
  "timings": [{label, problem, dtype, split_k, ms, ...}], "layers": [{..., cudnn_ms}]}``.
  A row names its kernel by label: its identity key is the label's spec's, its blob the
  one the cache's entry names now (the file cannot say which blob ran: import it into the
  cache the benchmark read). ``ms`` is the benchmark's mean of ``iters`` launches, kept as
  the median, spread 0. The file names only the device, so its class has no SM count or
  versions unless ``--device-class`` names a class of the cache to add the rows to.

The file is input: read capped (``MAX_TIMINGS_FILE``) without following a symlink (a FIFO
or a device is refused before it is opened for reading), JSON with no NaN, no Infinity, no
repeated key and no field this reader does not know, at most ``MAX_ROWS`` rows (counted
before any is read), every value typed and bounded (``cache/timings.py``'s checks), and
every row checked against the cache: its kernel is an entry of the target, the blob it
timed is the entry's blob, its dtype the entry's, and the kernel serves the problem at
that degree. The first failure is one line (``ImportRefused``: the CLI exits 2) and
nothing is written.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, replace

from wgradcache.cache.entry import CorruptEntry, Entry
from wgradcache.cache.store import TargetCache
from wgradcache.cache.timings import (
    MAX_ITERATIONS,
    MAX_MS,
    MAX_ROWS,
    MAX_TIMINGS_FILE,
    BadTimings,
    DeviceClass,
    TimingRow,
    TimingsFile,
    VendorRow,
    check_timings_doc,
    is_slug,
    merge_files,
    over_cap,
    row_key,
)
from wgradcache.files.capped import Refused, read_capped
from wgradcache.files.jsondoc import parse_json

__all__ = ["ImportRequest", "ImportReport", "ImportRefused", "import_timings", "read_import"]

_MAX_COUNT = 100 * MAX_ROWS  # tune --json's counts of timings skipped or left: a bound


class ImportRefused(ValueError):
    """One line: ``<file>: <where>: <why>``; nothing was imported."""


@dataclass(frozen=True)
class ImportRequest:
    path: str
    cache_dir: str = "cache"
    target: str | None = None  # None: the file's
    device_class: str | None = None  # a class slug of the cache to add the rows to
    now: float | None = None  # the time a benchmark file's rows are stamped with


@dataclass(frozen=True)
class ImportReport:
    target: str
    device_class: str
    device: str
    imported: int  # rows read from the file
    added: int  # rows the class did not hold (or held older)
    rows: int  # rows of the class after the import
    refit: str = ""  # what the refit said ("" when no refit ran)

    def to_json(self) -> dict:
        return {"target": self.target, "device_class": self.device_class,
                "device": self.device, "imported": self.imported, "added": self.added,
                "rows": self.rows, "refit": self.refit}


def _shown(path: str) -> str:
    return path if path.isprintable() else repr(path)[1:-1]


def _load(path: str) -> object:
    where = _shown(path)
    try:
        data = read_capped(path, MAX_TIMINGS_FILE, follow=False, missing_ok=False)
    except Refused as e:
        why = {"kind": f"{e.detail}, not a regular file (not followed)",
               "size": f"{e.detail} bytes, over the {MAX_TIMINGS_FILE >> 20} MiB cap",
               "grew": f"grew past the {MAX_TIMINGS_FILE >> 20} MiB cap while read",
               "replaced": "replaced while being read"}.get(e.code, str(e.detail))
        raise ImportRefused(f"{where}: cannot read: {why}") from None
    except ValueError as e:  # a NUL in the path
        raise ImportRefused(f"{where}: cannot read: {e}") from None
    return parse_json(data, where, ImportRefused)  # type: ignore[arg-type]


# -- benchmarks/device_speed.py's form ----------------------------------------------------
_SPEED_TOP = {"device", "torch", "cudnn", "cache_dir", "warmup", "iters", "top", "layers",
              "timings", "aggregate", "seconds", "timing"}
_SPEED_ROW = {"layer", "problem", "dtype", "rank", "label", "geometry", "split_k",
              "reduction", "ms", "tflops"}
_SPEED_LAYER = {"layer", "problem", "dtype", "count", "flops", "cudnn_ms", "cudnn_tflops",
                "candidates", "best_label", "best_ms", "best_tflops", "best_vs_cudnn",
                "select_label", "select_ms", "select_tflops", "select_vs_best",
                "select_measured_rank", "best_select_rank", "best_error_vs_cudnn", "sweep"}
_SPEED_DEVICE = re.compile(r"[a-z0-9_]{1,20} device [0-9]{1,3} \((?P<name>[^()]{1,100})\)")


@dataclass(frozen=True)
class _Parsed:
    """A file's rows before the cache is consulted: the class, the target (None: from the
    labels), and per row either its identity and blob (tune's form) or its label."""

    device: DeviceClass
    target: str | None
    rows: tuple[TimingRow, ...]
    labels: tuple[str, ...]  # per row, device_speed's form only
    vendor: tuple[VendorRow, ...]
    named: bool  # the file named its class whole (tune's form)


def _ms(v, where: str) -> float:
    if type(v) not in (int, float) or not (math.isfinite(v) and 0 < v <= MAX_MS):
        raise BadTimings(f"{where}: {str(v)[:40]} is not milliseconds in (0, {MAX_MS:g}]")
    return float(v)


def _only(d: object, allowed: set[str], where: str) -> dict:
    if type(d) is not dict:
        raise BadTimings(f"{where}: {type(d).__name__}, not an object")
    for k in d:
        if k not in allowed:
            raise BadTimings(f"{where}: unknown field {str(k)[:40]!r}")
    return d


def _speed(doc: dict, now: float) -> _Parsed:
    _only(doc, _SPEED_TOP, "file")
    rows, layers = doc.get("timings"), doc.get("layers", [])
    for name, v in (("timings", rows), ("layers", layers)):
        if type(v) is not list:
            raise BadTimings(f"{name}: {type(v).__name__}, not a list")
        if len(v) > MAX_ROWS:
            raise BadTimings(f"{name}: {len(v)} rows, more than {MAX_ROWS}")
    dev = doc.get("device")
    m = _SPEED_DEVICE.fullmatch(dev) if type(dev) is str else None
    if m is None:
        raise BadTimings(f"device: {str(dev)[:60]!r} is not '<arch> device <n> (<name>)'")
    iters = doc.get("iters", 1)
    if type(iters) is not int or not 1 <= iters <= MAX_ITERATIONS:
        raise BadTimings(f"iters: {str(iters)[:40]} is not an integer in [1, "
                         f"{MAX_ITERATIONS}]")
    timing = doc.get("timing", "eager")  # a file of before 12-07 timed from the host
    if timing not in ("graph", "eager"):
        raise BadTimings(f"timing: {str(timing)[:40]!r} is not 'graph' or 'eager'")
    base = {"device": {"name": m["name"], "sm_count": 0, "driver": "", "runtime": "",
                       "timing": "graph" if timing == "graph" else ""},
            "rows": [], "vendor": [], "fit": None}
    device = check_timings_doc(base).device  # the name's own check
    out, labels = [], []
    for i, r in enumerate(rows):
        where = f"timings[{i}]"
        _only(r, _SPEED_ROW, where)
        for k in ("label", "problem", "dtype", "split_k", "ms"):
            if k not in r:
                raise BadTimings(f"{where}: no field {k!r}")
        if type(r["label"]) is not str or len(r["label"]) > 200:
            raise BadTimings(f"{where}.label: not a kernel label")
        labels.append(r["label"])
        out.append({"identity_key": "0" * 64, "blob": "0" * 64, "problem": r["problem"],
                    "dtype": r["dtype"], "degree": r["split_k"],
                    "median_ms": _ms(r["ms"], f"{where}.ms"), "spread_ms": 0.0,
                    "iterations": iters, "when": now})
    vendor = []
    for i, ly in enumerate(layers):
        where = f"layers[{i}]"
        _only(ly, _SPEED_LAYER, where)
        if "cudnn_ms" in ly:
            vendor.append({"library": "cudnn", "problem": ly.get("problem"),
                           "dtype": ly.get("dtype"),
                           "median_ms": _ms(ly["cudnn_ms"], f"{where}.cudnn_ms"),
                           "spread_ms": 0.0, "iterations": iters, "when": now})
    try:
        got = check_timings_doc({**base, "rows": out, "vendor": vendor}, unique=False)
    except BadTimings as e:  # name the file's own fields
        raise BadTimings(str(e).replace("rows[", "timings[").replace(".degree", ".split_k")
                         .replace(".median_ms", ".ms").replace("vendor[", "layers[")) from None
    return _Parsed(device, None, got.rows, tuple(labels), got.vendor, False)


def read_import(path: str, now: float) -> _Parsed:
    """The file's rows, each value checked (``ImportRefused`` otherwise); not yet the cache."""
    doc = _load(path)
    where = _shown(path)
    try:
        if type(doc) is dict and "timings" in doc:
            return _speed(doc, now)
        if type(doc) is dict:  # tune --json's report lines: checked, not imported
            doc = dict(doc)
            failures, said = doc.pop("failures", []), doc.pop("refit", "")
            if type(failures) is not list or len(failures) > MAX_ROWS or not all(
                    type(x) is str and len(x) <= 1000 for x in failures):
                raise BadTimings("failures: not a list of lines")
            if type(said) is not str or len(said) > 1000:
                raise BadTimings("refit: not a line")
            for name in ("already_measured", "remaining", "remaining_layers"):
                n = doc.pop(name, 0)
                if type(n) is not int or not 0 <= n <= _MAX_COUNT:
                    raise BadTimings(f"{name}: {str(n)[:40]} is not a count in "
                                     f"[0, {_MAX_COUNT}]")
        got = check_timings_doc(doc, extra=("target",))
        target = doc["target"]  # type: ignore[index]
        if type(target) is not str or len(target) > 40:
            raise BadTimings(f"target: {str(target)[:40]!r} is not a target")
        return _Parsed(got.device, target, got.rows, (), got.vendor, True)
    except BadTimings as e:
        raise ImportRefused(f"{where}: {e}") from None


# -- against the cache --------------------------------------------------------------------
def _resolve(cache: TargetCache, parsed: _Parsed, where: str) -> tuple[TimingRow, ...]:
    """Each row with its kernel proven an entry of ``cache`` that served it; the first that
    is not refuses the import."""
    from wgradcache.model.problem import ConvProblem
    from wgradcache.model.spec import KernelSpec, from_label
    from wgradcache.wgrad.capability import serves

    entries: dict[str, Entry | None] = {}
    out = []
    for i, row in enumerate(parsed.rows):
        at = f"{where}: {'rows' if parsed.named else 'timings'}[{i}]"
        if parsed.labels:
            try:
                spec = from_label(parsed.labels[i])
            except ValueError:
                raise ImportRefused(f"{at}.label: {parsed.labels[i][:80]!r} is not a kernel "
                                    "label") from None
            if spec.target != cache.target:
                raise ImportRefused(f"{at}.label: a {spec.target} kernel, this import is "
                                    f"into {cache.target}")
            ik = spec.identity_key()
        else:
            ik = row.identity_key
        if ik not in entries:
            try:
                entries[ik] = cache.read_entry(ik)
            except CorruptEntry as e:
                raise ImportRefused(f"{at}: its entry is not whole: {e}") from None
        entry = entries[ik]
        if entry is None:
            name = parsed.labels[i] if parsed.labels else ik[:16]
            raise ImportRefused(f"{at}: kernel {name} is not in this cache's {cache.target} "
                                "entries")
        if parsed.labels:
            row = replace(row, identity_key=ik, blob=entry.blob)
        elif row.blob != entry.blob:
            raise ImportRefused(f"{at}.blob: {row.blob[:16]} is not the blob of "
                                f"{entry.label} here ({entry.blob[:16]}): measured on "
                                "another build")
        if row.dtype != entry.dtype:
            raise ImportRefused(f"{at}.dtype: {row.dtype}, the entry's is {entry.dtype}")
        spec = KernelSpec.from_dict(entry.identity)
        ok, why = serves(spec, ConvProblem.parse(row.problem), row.degree)
        if not ok:
            raise ImportRefused(f"{at}: {entry.label} does not serve {row.problem} at split "
                                f"{row.degree}: {why}")
        out.append(row)
    keys = [row_key(r) for r in out]
    if len(set(keys)) != len(keys):
        dup = next(i for i, k in enumerate(keys) if keys.index(k) != i)
        raise ImportRefused(f"{where}: row {dup} measures the kernel, problem, dtype and "
                            "degree of a row before it")
    return tuple(out)


def _class_of(cache: TargetCache, parsed: _Parsed, asked: str | None,
              where: str) -> tuple[DeviceClass, TimingsFile | None]:
    """The class the rows go to, and its file in the cache (None: a new class)."""
    slug = parsed.device.slug()
    if asked is not None:
        if not is_slug(asked):
            raise ImportRefused(f"--device-class {asked[:60]!r}: not a device class "
                                "(<name>-<12 hex digits>: a file name under <target>/timings/)")
        if parsed.named and asked != slug:
            raise ImportRefused(f"{where}: its device class is {slug}, not {asked}")
        slug = asked
    try:
        have = cache.read_timings(slug)
    except CorruptEntry as e:
        raise ImportRefused(f"{e} (the cache's own: `wgradcache gc` removes it)") from None
    if asked is not None and have is None and not parsed.named:
        raise ImportRefused(f"--device-class {asked}: no such class in the {cache.target} "
                            f"cache (it has: {', '.join(cache.timing_classes()) or 'none'})")
    if have is not None and have.device.timing != parsed.device.timing:
        how = {"": "from the host", "graph": "by graph replay"}
        raise ImportRefused(f"{where}: timed {how.get(parsed.device.timing, '?')}, class "
                            f"{slug} {how.get(have.device.timing, '?')}: rows of two timing "
                            "methods are not ranked together")
    return (have.device if have is not None else parsed.device), have


def import_timings(req: ImportRequest, refit=None) -> ImportReport:
    """Check the whole file against the cache, then merge it into its class (under the
    writer lock, re-reading the class's file there). ``refit(cache, slug)``: called after
    the write (``pipeline/fit.py``), its one-line result reported."""
    path = os.fspath(req.path)
    where = _shown(path)
    parsed = read_import(path, time.time() if req.now is None else req.now)
    target = parsed.target or req.target
    if target is None:
        if not parsed.labels:
            raise ImportRefused(f"{where}: no rows, and no target to import them into")
        from wgradcache.model.spec import from_label
        try:
            target = from_label(parsed.labels[0]).target
        except ValueError:
            raise ImportRefused(f"{where}: timings[0].label: not a kernel label") from None
    if req.target is not None and target != req.target:
        raise ImportRefused(f"{where}: its rows are of {target}, not --target {req.target}")
    from wgradcache.model.targets import check_target

    ok, why = check_target(target)
    if not ok:
        raise ImportRefused(f"{where}: target: {why}")
    if not parsed.rows:
        raise ImportRefused(f"{where}: no rows (nothing was measured)")
    cache = TargetCache(req.cache_dir, target)
    rows = _resolve(cache, parsed, where)
    device, _ = _class_of(cache, parsed, req.device_class, where)
    new = TimingsFile(device, rows, parsed.vendor)
    with cache.lock():
        _, have = _class_of(cache, parsed, req.device_class, where)
        union = new if have is None else merge_files(have, new)
        if why := over_cap(union):
            raise ImportRefused(f"{where}: the class would hold {why}; nothing imported")
        added = len(set(union.rows) - set(have.rows if have else ()))
        cache.write_timings(union)
    said = refit(cache, device.slug()) if refit is not None else ""
    return ImportReport(target, device.slug(), device.describe(), len(rows), added,
                        len(union.rows), said)
