"""Prove a cache whole, sound and correct (DESIGN §7).

Four levels, each including the ones before it:

* integrity: every entry is whole JSON, its blob exists with the recorded size and sha256,
  its fields agree with its identity (label, variant, dtype, block, emitted symbol), no
  entry is stale (its identity is no longer walked), and the entry count is compared with
  ``count`` (complete or not, and how much is missing). An orphan blob (no entry names it:
  what a build killed between a blob's publish and its entry's leaves) is a failure too,
  counted in the summary with the hint that ``gc --orphans`` removes it (once it is past
  gc's grace, ``ORPHAN_GRACE``: the hint says when). A temporary file of the store's naming
  (a write killed between create and rename) is a failure too, with gc's hint: a cache
  that holds bytes nothing accounts for has not been proven whole, and gc makes it whole
  without a rebuild;
* structure (``verify_structure``): each stored code object is read and disassembled, and
  its symbol, kernel arguments, LDS, registers and ISA statistics derived from the bytes
  are compared with the spec's requirements and with what the entry records (a field that
  differs fails, naming it); the entry's own ``isa`` and ``code_object`` are never trusted;
* reproduce (``verify_reproduce``): each entry's job is emitted and compiled again, as
  the build does, and must give the stored blob byte for byte (builds are deterministic);
  stage-2 companions too. With ``--sample``, on the sample numerics runs on;
* numerics: the kernel runs in the emulator (or on a device) against the float64
  reference. What the emulator runs is the IR, and reproduce has proven that IR's compile
  to be the stored blob, so it is the stored binary's behaviour that is checked. An
  unsplit kernel runs ``probe_problem`` (or each ``--problem`` it serves) once. A split-K
  kernel (atomic, two-stage) runs ``split_probe``, a K long enough that the policy splits
  it (or each ``--problem`` it serves), at the policy's degree and at ``EXPLICIT_DEGREES``
  and one past the K tiles (an empty last slice), each where ``serves`` admits the degree;
  the report names every (problem, degree) run per entry.

Reproduce is a level below numerics rather than an option: numerics without it would
check an IR nobody proved to be the stored binary's. ``--no-reproduce`` (a device machine
without the build's toolchain) does just that, and says so in its help: the blob is held
only to the facts of its spec that structure reads from its bytes, which refuse another
tile's or other widths' binary renamed to this kernel, not one of the same shape.
Reproduce costs one compile per sampled entry (~0.2 s), less than one emulated run.

With ``--problem``, an entry that none of the problems serves is *not covered*: not a
failure, not a pass. It is counted (``not_covered`` in the JSON, the summary line, a skipped
JUnit case) and makes the run not ok (exit 1): a numerics run that left an entry unchecked
has not proven the cache. Without ``--problem`` the probes serve every walked spec.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from wgradcache.cache.entry import CorruptEntry, Entry, Stage2Entry
from wgradcache.cache.store import TargetCache, sha256_bytes, stage2_name
from wgradcache.model.backends import backend_of
from wgradcache.model.spec import DTYPE_KEYS, KernelSpec
from wgradcache.model.targets import get_target
from wgradcache.pipeline.verify_numerics import (
    EXPLICIT_DEGREES,
    NumericsResult,
    NumericsRun,
    launcher,
    probe_problem,
    run_entry,
    split_degrees,
    split_probe,
)
from wgradcache.pipeline.verify_structure import isa_problems

__all__ = ["LEVELS", "EXPLICIT_DEGREES", "VerifyRequest", "VerifyReport", "Failure",
           "NumericsRun", "NumericsResult", "verify", "isa_problems", "probe_problem",
           "split_probe", "split_degrees", "write_junit"]

LEVELS = ("integrity", "structure", "reproduce", "numerics")
@dataclass(frozen=True)
class Failure:
    key: str
    label: str
    level: str
    reason: str

    def to_json(self) -> dict:
        return {"key": self.key, "label": self.label, "level": self.level,
                "reason": self.reason}


@dataclass(frozen=True)
class VerifyRequest:
    cache_dir: str
    targets: tuple[str, ...] = ()
    level: str = "structure"
    sample: float = 1.0
    seed: int = 0
    problems: tuple[str, ...] = ()
    device: str = "auto"  # auto | emulator | hip | cuda
    geometries_file: str | None = None
    # False (--no-reproduce): numerics without compiling each job again, for a device
    # machine that lacks the build's toolchain; the IR check stays: each entry's
    # re-emitted IR must hash, with the codegen options and toolchain it records, to
    # its blob's content key (``_ir_matches``). The bytes are then bound to the spec only
    # by what structure reads from them (symbol, ABI, LDS, block, loads per K step, ISA):
    # that they are the compile of the IR is left unproven
    reproduce: bool = True
    # a regular expression: structure, reproduce and numerics run only on the entries whose
    # label it finds (integrity still sees every entry and blob); "" is every entry
    label: str = ""


@dataclass
class VerifyReport:
    checked: int = 0
    failures: list[Failure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    targets: dict[str, dict] = field(default_factory=dict)
    passed_cases: list[tuple[str, str, str]] = field(default_factory=list)  # key, label, level
    numerics: list[NumericsResult] = field(default_factory=list)

    @property
    def not_covered(self) -> list[NumericsResult]:
        return [n for n in self.numerics if n.status == "not_covered"]

    @property
    def ok(self) -> bool:
        """No failure and no entry left unchecked by the given problems."""
        return not self.failures and not self.not_covered

    def to_json(self) -> dict:
        return {"ok": self.ok, "checked": self.checked, "failed": len(self.failures),
                "not_covered": len(self.not_covered),
                "failures": [f.to_json() for f in self.failures], "notes": self.notes,
                "targets": self.targets, "numerics": [n.to_json() for n in self.numerics]}


@dataclass
class _Walk:
    """The walk's specs by identity key, and (built on first use) by kernel symbol: what a
    blob two identities share may be named after."""

    specs: dict[str, KernelSpec]
    _by_symbol: dict[str, KernelSpec] | None = None

    def by_symbol(self, symbol: str) -> KernelSpec | None:
        if self._by_symbol is None:
            from wgradcache.wgrad.kernel import kernel_symbol

            self._by_symbol = {kernel_symbol(s): s for s in self.specs.values()}
        return self._by_symbol.get(symbol)


@dataclass(frozen=True)
class _Row:
    """An entry (or a stage-2 companion, ``spec`` None) whose blob is its recorded bytes."""

    key: str
    label: str
    entry: Entry | Stage2Entry
    spec: KernelSpec | None
    data: bytes


def _walk(target: str, geometries_file: str | None) -> _Walk:
    from wgradcache.jobs import default_jobdata, walk

    data = default_jobdata(geometries_file)
    return _Walk({s.identity_key(): s for s in walk(target, DTYPE_KEYS, None, data)})


def _expected_count(target: str, entries: list[Entry], geometries_file: str | None) -> int:
    """``count`` for the dtypes the cache holds (an fp32-dW build is opt-in)."""
    from wgradcache.jobs import count, default_jobdata

    data = default_jobdata(geometries_file)
    dtypes = sorted({e.dtype for e in entries if e.dtype in DTYPE_KEYS}
                    | set(data.default_dtypes))
    return sum(sum(v.values()) for v in count(target, dtypes, None, data).values())


def _blob_bytes(cache: TargetCache, entry: Entry | Stage2Entry) -> tuple[bytes | None, str]:
    """(the blob's bytes, "") when they are what the entry records, else (None, why)."""
    name = f"blob {entry.blob[:16]}"
    try:
        data = cache.read_blob(entry.blob)
    except FileNotFoundError:
        return None, f"{name} is missing"
    except CorruptEntry as e:  # a symlink, 8 GB, a FIFO
        return None, str(e)
    if len(data) != entry.blob_size or sha256_bytes(data) != entry.blob_sha256:
        return None, f"{name} does not match the size/sha256 its entry records"
    return data, ""


def _identity_problem(ik: str, entry: Entry, walk: _Walk) -> tuple[KernelSpec | None, str]:
    """(the entry's spec, "") or (None, why its identity cannot be trusted). That the
    identity hashes to the file name is the entry reader's check (``read_entry``)."""
    from wgradcache.wgrad.kernel import kernel_symbol

    if ik not in walk.specs:
        return None, ("stale: the current walk does not yield this identity "
                      "(`wgradcache gc --stale` removes it)")
    try:
        spec = KernelSpec.from_dict(entry.identity)
    except (KeyError, TypeError, ValueError) as e:
        return None, f"bad identity: {e}"
    told = {"label": (entry.label, spec.label()), "variant": (entry.variant, spec.variant),
            "dtype": (entry.dtype, spec.dtype_key),
            "block_size": (entry.block_size, spec.block_size),
            "emitted_symbol": (entry.emitted_symbol, kernel_symbol(spec))}
    wrong = [name for name, (have, want) in told.items() if have != want]
    if wrong:
        return None, f"{', '.join(wrong)} not what its identity says"
    return spec, ""


def _check_entries(cache: TargetCache, walk: _Walk, rep: VerifyReport
                   ) -> tuple[list[_Row], list[Entry], set[str]]:
    """The whole, walked entries whose blob is their bytes; every whole entry; the blobs
    they name."""
    good: list[_Row] = []
    entries: list[Entry] = []
    referenced: set[str] = set()
    for ik, entry in cache.iter_entries():
        rep.checked += 1
        if isinstance(entry, CorruptEntry):
            rep.failures.append(Failure(ik, "?", "integrity", str(entry)))
            continue
        referenced.add(entry.blob)
        entries.append(entry)
        data, why = _blob_bytes(cache, entry)
        spec = None
        if data is not None:
            spec, why = _identity_problem(ik, entry, walk)
        if spec is None:
            rep.failures.append(Failure(ik, entry.label, "integrity", why))
            continue
        good.append(_Row(ik, entry.label, entry, spec, data))
        rep.passed_cases.append((ik, entry.label, "integrity"))
    return good, entries, referenced


def _check_stage2(cache: TargetCache, good: list[_Row], rep: VerifyReport,
                  referenced: set[str]) -> list[_Row]:
    """The stage-2 companions the two-stage entries need, whole and with their bytes;
    every companion's blob counts as referenced."""
    stage2 = cache.stage2_entries()
    for entry in stage2.values():
        if not isinstance(entry, CorruptEntry):
            referenced.add(entry.blob)
    rows = []
    for dw, r in sorted({(x.spec.dw_dtype, x.spec.ws_replicas) for x in good
                         if x.spec.reduction == "two_stage"}):
        name = stage2_name(dw, r)
        entry, label = stage2.get(name), f"stage2 {name}"
        rep.checked += 1
        if entry is None or isinstance(entry, CorruptEntry):
            rep.failures.append(Failure(name, label, "integrity",
                                        "two-stage entries without their stage-2 kernel"
                                        if entry is None else str(entry)))
            continue
        data, _ = _blob_bytes(cache, entry)
        if data is None:
            rep.failures.append(Failure(name, label, "integrity",
                                        "stage-2 blob missing or not what its entry records"))
            continue
        rows.append(_Row(name, label, entry, None, data))
        rep.passed_cases.append((name, label, "integrity"))
    return rows


def _gc_hint(command: str, mtime: float) -> str:
    """What gc does with a leftover of this age: at once, or once past ``ORPHAN_GRACE``
    (gc's own grace: the hint never promises a removal gc would not do)."""
    from wgradcache.cache.gc import ORPHAN_GRACE, grace_text

    if time.time() - mtime >= ORPHAN_GRACE:
        return f"`{command}` removes it"
    return (f"`{command}` removes it once it is {grace_text()} old; until then a writer may "
            "still need it")


def _check_orphans(cache: TargetCache, referenced: set[str], rep: VerifyReport) -> int:
    """One failure per blob no entry names (left by a build killed between a blob and its
    entry, or by an entry removed by hand); returns how many."""
    orphans = [k for k in cache.blob_keys() if k not in referenced]
    for key in orphans:
        rep.checked += 1
        hint = _gc_hint("wgradcache gc --orphans", cache.blob_mtime(key))
        rep.failures.append(Failure(key, "", "integrity",
                                    f"orphan blob: no entry names it ({hint})"))
    return len(orphans)


def _check_temps(cache: TargetCache, rep: VerifyReport) -> int:
    """One failure per temporary file of the store's naming (a write killed between its
    create and its rename); returns how many."""
    temps = cache.temp_files()
    for sub, name, mtime in temps:
        rep.checked += 1
        rep.failures.append(Failure(
            f"{sub}/{name}" if sub else name, "", "integrity",
            f"temporary file of an unfinished write: nothing accounts for it "
            f"({_gc_hint('wgradcache gc', mtime)})"))
    return len(temps)


def _check_timings(cache: TargetCache, referenced_by: dict[str, str],
                   rep: VerifyReport) -> tuple[int, int]:
    """Each device class's timings file: whole (the reader's checks: finite positive times,
    bounded counts and sizes, its class its name), and every row of a kernel the cache
    holds; a row of an entry's older blob is stale (ignored by select, dropped by gc), not
    a failure. Returns (rows, stale rows)."""
    from wgradcache.cache.timings import row_is_current

    rows = stale = 0
    for slug in cache.timing_classes():
        rep.checked += 1
        try:
            tf = cache.read_timings(slug)
        except CorruptEntry as e:
            rep.failures.append(Failure(f"timings:{slug}", "", "integrity", str(e)))
            continue
        if tf is None:
            continue
        rows += len(tf.rows)
        orphans = [r for r in tf.rows if r.identity_key not in referenced_by]
        stale += sum(1 for r in tf.rows if r.identity_key in referenced_by
                     and not row_is_current(r, referenced_by))
        if orphans:
            rep.failures.append(Failure(
                f"timings:{slug}", "", "integrity",
                f"{cache.timings_path(slug)}: {len(orphans)} row(s) of no entry, e.g. "
                f"{orphans[0].identity_key[:16]} (`wgradcache gc` drops them)"))
    return rows, stale


def _integrity(cache: TargetCache, req: VerifyRequest, rep: VerifyReport, walk: _Walk
               ) -> tuple[list[_Row], list[_Row]]:
    """The entries and the stage-2 companions that passed, in that order."""
    good, entries, referenced = _check_entries(cache, walk, rep)
    stage2 = _check_stage2(cache, good, rep, referenced)
    orphans = _check_orphans(cache, referenced, rep)
    temps = _check_temps(cache, rep)
    timed, stale = _check_timings(cache, {e.identity_key: e.blob for e in entries}, rep)
    expected = _expected_count(cache.target, entries, req.geometries_file)
    rep.targets[cache.target] = {"entries": len(entries), "expected": expected,
                                 "missing": max(0, expected - len(good)),
                                 "complete": len(good) >= expected, "orphans": orphans,
                                 "temp_files": temps, "timing_rows": timed,
                                 "stale_timing_rows": stale}
    return good, stage2


def _structure(cache: TargetCache, rows: list[_Row], walk: _Walk, rep: VerifyReport
               ) -> list[_Row]:
    """The rows whose stored binary is what its spec needs and its entry records."""
    from wgradcache.pipeline.verify_structure import (
        disassembler_missing,
        entry_problems,
        stage2_problems,
    )

    missing = disassembler_missing(cache.target)
    if missing:
        rep.failures.append(Failure("-", cache.target, "structure", missing))
        return []
    backend_of(cache.target).prefetch_listings([row.data for row in rows])
    ok_rows = []
    for row in rows:
        problems = (entry_problems(row.spec, row.entry, row.data, walk.by_symbol)
                    if row.spec is not None
                    else stage2_problems(row.entry, row.data, cache.target))
        if problems:
            rep.failures.append(Failure(row.key, row.label, "structure", "; ".join(problems)))
        else:
            rep.passed_cases.append((row.key, row.label, "structure"))
            ok_rows.append(row)
    return ok_rows


def _reproduce(cache: TargetCache, rows: list[_Row], rep: VerifyReport) -> list[_Row]:
    """The rows whose job, compiled again, gives the stored blob."""
    from wgradcache.pipeline.verify_reproduce import StoredKernel, reproduce_all
    from wgradcache.pipeline.workers import Stage2Job

    kernels = []
    for row in rows:
        e = row.entry
        job = (row.spec if row.spec is not None
               else Stage2Job(cache.target, e.dw_dtype, e.ws_replicas))
        opts = e.codegen_options if isinstance(e, Entry) else None
        kernels.append(StoredKernel(row.key, job, e.symbol, e.blob, row.data,
                                    e.toolchain_digest, opts))
    reasons = reproduce_all(cache.target, kernels)
    ok_rows = []
    for row in rows:
        why = reasons[row.key]
        if why:
            rep.failures.append(Failure(row.key, row.label, "reproduce", why))
        else:
            rep.passed_cases.append((row.key, row.label, "reproduce"))
            ok_rows.append(row)
    return ok_rows



def _ir_matches(cache: TargetCache, rows: list[_Row], rep: VerifyReport) -> list[_Row]:
    """``--no-reproduce``: the entry rows whose re-emitted IR, keyed with the codegen
    options and toolchain identity the entry records, is the entry's blob's content key
    (the blob itself was proven by integrity and structure). Stage-2 rows pass through:
    numerics launches them only beside their entries."""
    from wgradcache.cache.store import content_key
    from wgradcache.wgrad.emit import emit_ir

    ok_rows = []
    for row in rows:
        if row.spec is None:
            ok_rows.append(row)
            continue
        e = row.entry
        k = emit_ir(row.spec)
        if content_key(k.ir_text, k.symbol, cache.target, e.codegen_options,
                       e.toolchain) != e.blob:
            rep.failures.append(Failure(row.key, row.label, "numerics",
                                        "the stored binary is not this IR: re-emitted IR "
                                        "hashes to another content key"))
            continue
        ok_rows.append(row)
    return ok_rows


def _device(cache: TargetCache, req: VerifyRequest, rep: VerifyReport):
    """The device numerics run on (None: the emulator), with its note; False when
    ``--device hip|cuda`` found none (a failure is recorded). ``auto`` asks the runtime of
    the target's vendor: CUDA for sm_90, HIP for the AMD targets."""
    if req.device not in ("auto", "hip", "cuda"):
        return None
    backend = backend_of(cache.target)
    api = backend.runtime
    if req.device != "auto" and req.device != api:
        why = f"{cache.target} code objects run through {api}, not {req.device}"
        rep.failures.append(Failure("-", cache.target, "numerics",
                                    f"--device {req.device}: {why}"))
        return False
    dev, why = backend.device_for(cache.target)
    if dev is None:
        if req.device == api:  # the one line: nothing ran
            rep.failures.append(Failure("-", cache.target, "numerics",
                                        f"--device {api}: no device: {why}"))
            return False
        note = f"{api}: no {cache.target} device ({why}); numerics ran in the emulator"
    else:
        note = f"{api}: numerics ran on the {dev.describe()} (stored code objects)"
    if note not in rep.notes:
        rep.notes.append(note)
    return dev


@dataclass(frozen=True)
class _Hooks:
    """``verify``'s callbacks, as the levels hand them down: ``advance(n)`` as entries
    settle, ``on_total(n)`` once the numerics rows are known, ``on_result`` per row."""

    advance: Callable[[int], None] = lambda n: None
    on_total: Callable[[int], None] = lambda n: None
    on_result: Callable[[NumericsResult], None] = lambda r: None


def _numerics(cache: TargetCache, rows: list[_Row], req: VerifyRequest, rep: VerifyReport,
              hooks: _Hooks) -> None:
    """Emulate (or launch) every entry row; reproduce has proven each one's IR compiles to
    its stored blob, so the IR the emulator runs is the stored binary's."""
    from wgradcache.model.problem import ConvProblem
    from wgradcache.wgrad.capability import serves

    problems = [ConvProblem.parse(p) for p in req.problems]
    dev = _device(cache, req, rep)
    if dev is False:
        return
    for row in rows:
        ik, label, spec = row.key, row.label, row.spec
        probe = split_probe(spec) if spec.reduction != "none" else probe_problem(spec)
        cases = [p for p in problems if serves(spec, p)[0]] if problems else [probe]
        if not cases:
            rep.numerics.append(NumericsResult(ik, label, "not_covered"))
            hooks.on_result(rep.numerics[-1])
            hooks.advance(1)
            continue
        resident = backend_of(spec.target).resident_ctas(row.entry.code_object, spec.target)
        runs, bad = run_entry(launcher(cache, dev, row, req.seed), spec, cases, resident)
        if bad:
            rep.failures.append(Failure(ik, label, "numerics", "; ".join(bad)))
        else:
            rep.passed_cases.append((ik, label, "numerics"))
        rep.numerics.append(NumericsResult(ik, label, "failed" if bad else "passed",
                                           tuple(runs)))
        hooks.on_result(rep.numerics[-1])
        hooks.advance(1)


def _sampled(rows: list[_Row], req: VerifyRequest) -> list[_Row]:
    """The entry rows reproduce and numerics run on (``--sample``), and every stage-2 row
    (a handful per target)."""
    if req.sample >= 1.0:
        return rows
    rng = random.Random(req.seed)
    return [r for r in rows if r.spec is None or rng.random() < req.sample]


def _verify_target(cache: TargetCache, req: VerifyRequest, rep: VerifyReport,
                   hooks: _Hooks) -> None:
    depth = LEVELS.index(req.level)
    walk = _walk(cache.target, req.geometries_file)
    entries, stage2 = _integrity(cache, req, rep, walk)
    if depth < LEVELS.index("structure"):
        return
    if req.label:  # structure on: the entries the expression finds (and every stage 2)
        pattern = re.compile(req.label)
        entries = [r for r in entries if pattern.search(r.label)]
    rows = _structure(cache, entries + stage2, walk, rep)
    if depth < LEVELS.index("reproduce"):
        return
    if req.reproduce or depth < LEVELS.index("numerics"):
        rows = _reproduce(cache, _sampled(rows, req), rep)
    else:
        rows = _ir_matches(cache, _sampled(rows, req), rep)
    if depth < LEVELS.index("numerics"):
        return
    rows = [r for r in rows if r.spec is not None]
    hooks.on_total(len(rows))
    _numerics(cache, rows, req, rep, hooks)


def verify(req: VerifyRequest, advance: Callable[[int], None] | None = None,
           on_total: Callable[[int], None] | None = None,
           on_result: Callable[[NumericsResult], None] | None = None) -> VerifyReport:
    """Verify ``req``'s cache; ``on_result`` sees each entry's numerics result as soon as it
    is decided (``--stream``: a run cut short keeps what it did)."""
    if req.level not in LEVELS:
        raise ValueError(f"unknown level {req.level!r}; valid: {', '.join(LEVELS)}")
    from wgradcache.cache.catalog import cache_targets

    rep = VerifyReport()
    targets = req.targets or tuple(cache_targets(req.cache_dir))
    if not targets:
        rep.failures.append(Failure("-", "-", "integrity",
                                    f"no cache under {req.cache_dir}: nothing to verify"))
        return rep
    hooks = _Hooks(**{k: f for k, f in (("advance", advance), ("on_total", on_total),
                                         ("on_result", on_result)) if f is not None})
    for t in targets:
        get_target(t)
        _verify_target(TargetCache(req.cache_dir, t), req, rep, hooks)
    return rep


def write_junit(rep: VerifyReport, path: str | Path) -> None:
    """JUnit XML for CI: one testcase per (entry, level) checked, failures with the reason,
    not-covered entries skipped; a numerics case's system-out names its problems and
    degrees, so a CI page shows what ran. Written as every output is
    (``files.written``): ``Refused`` for a symlink or anything but a regular file there."""
    import xml.etree.ElementTree as ET

    from wgradcache.files.written import write_bytes

    ran = {n.key: n.describe() for n in rep.numerics if n.runs}
    suite = ET.Element("testsuite", name="wgradcache.pipeline.verify",
                       tests=str(len(rep.passed_cases) + len(rep.failures)
                                 + len(rep.not_covered)),
                       failures=str(len(rep.failures)), skipped=str(len(rep.not_covered)))

    def case(key: str, label: str, level: str) -> ET.Element:
        c = ET.SubElement(suite, "testcase", classname=f"verify.{level}", name=label or key)
        if level == "numerics" and ran.get(key):
            ET.SubElement(c, "system-out").text = ran[key]
        return c

    for key, label, level in rep.passed_cases:
        case(key, label, level)
    for f in rep.failures:
        c = case(f.key, f.label, f.level)
        ET.SubElement(c, "failure", message=f.reason).text = f"{f.key}: {f.reason}"
    for n in rep.not_covered:
        ET.SubElement(case(n.key, n.label, "numerics"), "skipped", message=n.describe())
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, ET.tostring(suite, encoding="utf-8", xml_declaration=True))
