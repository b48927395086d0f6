"""Prove a cache whole, sound and correct (DESIGN §7).

Three levels, each including the ones before it:

* integrity: every entry is whole JSON, its blob exists with the recorded size and sha256,
  no blob is orphaned, no entry is stale (its identity is no longer walked), and the entry
  count is compared with ``count`` (complete or not, and how much is missing);
* structure: each code object is an AMDGPU ELF of the target's mach with its symbol and
  kernel descriptor, LDS equal to what the generator allocates and within the target, no
  spills, no scratch, and the ISA statistics the variant requires;
* numerics: the IR is emitted again and must hash to the stored blob's content key (so the
  stored binary is this IR), then the kernel runs in the emulator (or on a device) against
  the float64 reference. An unsplit kernel runs ``probe_problem`` (or each ``--problem`` it
  serves) once. A split-K kernel (atomic, two-stage) runs ``split_probe``, a K long enough
  that the policy splits it (or each ``--problem`` it serves), at the policy's degree and at
  ``EXPLICIT_DEGREES`` and one past the K tiles (an empty last slice), each where ``serves``
  admits the degree; the report names every (problem, degree) run per entry.

With ``--problem``, an entry that none of the problems serves is *not covered*: not a
failure, not a pass. It is counted (``not_covered`` in the JSON, the summary line, a skipped
JUnit case) and makes the run not ok (exit 1): a numerics run that left an entry unchecked
has not proven the cache. Without ``--problem`` the probes serve every walked spec.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from wgradcache.cache.entry import CorruptEntry, Entry
from wgradcache.cache.store import TargetCache, sha256_bytes, stage2_name
from wgradcache.model.spec import DTYPE_KEYS, KernelSpec, elem_bytes, lds_bytes
from wgradcache.model.targets import get_target

__all__ = ["LEVELS", "EXPLICIT_DEGREES", "VerifyRequest", "VerifyReport", "Failure",
           "NumericsRun", "NumericsResult", "verify", "isa_problems", "probe_problem",
           "split_probe", "split_degrees", "write_junit"]

LEVELS = ("integrity", "structure", "numerics")
# Split degrees every split-K entry runs besides the policy's (and one past its K tiles):
# unsplit through a slice count that does not divide the K tiles.
EXPLICIT_DEGREES = (1, 2, 3, 7)
ATOMIC_FENCES = ("global_wb", "global_inv", "global_wbinv", "buffer_wbl2", "buffer_inv",
                 "buffer_gl1_inv", "buffer_wbinvl1", "buffer_wbinvl1_vol")


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
class NumericsRun:
    """One launch of an entry: the problem, the split degree, whether the policy chose it."""

    problem: str
    degree: int
    policy: bool
    passed: bool

    def to_json(self) -> dict:
        return {"problem": self.problem, "degree": self.degree, "policy": self.policy,
                "passed": self.passed}


@dataclass(frozen=True)
class NumericsResult:
    """An entry's numerics: ``status`` is "passed", "failed" or "not_covered" (no given
    problem serves it, so nothing ran)."""

    key: str
    label: str
    status: str
    runs: tuple[NumericsRun, ...] = ()

    @property
    def degrees(self) -> tuple[int, ...]:
        return tuple(sorted({r.degree for r in self.runs}))

    def describe(self) -> str:
        """'P at split 2 (policy), 1, 3, 7, 35' per problem; what text and JUnit show."""
        if self.status == "not_covered":
            return "not covered: serves none of the given problems"
        if not self.runs:
            return "nothing ran"
        parts = []
        for problem in dict.fromkeys(r.problem for r in self.runs):
            ds = [f"{r.degree} (policy)" if r.policy else str(r.degree)
                  for r in self.runs if r.problem == problem]
            parts.append(f"{problem} at split {', '.join(ds)}")
        return "; ".join(parts)

    def to_json(self) -> dict:
        return {"key": self.key, "label": self.label, "status": self.status,
                "degrees": list(self.degrees), "runs": [r.to_json() for r in self.runs]}


@dataclass(frozen=True)
class VerifyRequest:
    cache_dir: str
    targets: tuple[str, ...] = ()
    level: str = "structure"
    sample: float = 1.0
    seed: int = 0
    problems: tuple[str, ...] = ()
    device: str = "auto"  # auto | emulator | hip
    geometries_file: str | None = None


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


def probe_problem(spec: KernelSpec):
    """A small problem the spec serves that still hits its edges: a partial M tile
    (kpg 24 < tile_m), padding, a 3x3 filter and a reduction tail (N·Ho·Wo = 98)."""
    from wgradcache.model.problem import ConvProblem

    cpg = 16
    return ConvProblem(N=2, C=cpg, H=7, W=7, K=24, Y=3, X=3, stride=1, pad=1, dilation=1,
                       groups=1)


def split_probe(spec: KernelSpec):
    """The problem a split-K entry runs: K long enough that the policy splits it (wg_K =
    N·Ho·Wo >= 2·MIN_SLICE_K, so degree 2), not a multiple of tile_k (a tail tile), and the
    probe's other edges: a partial M tile, padding, a 3x3 filter. Channels are the spec's own
    load widths (two B vectors per tap, wg_N even for packed atomics), so every walked spec
    serves it; ~0.1-0.3 s per emulated run."""
    from wgradcache.model.problem import ConvProblem
    from wgradcache.wgrad.split_k import MIN_SLICE_K

    eb = elem_bytes(spec.dtype)
    a, b = ((spec.chunk_a // eb, spec.chunk_b // eb) if spec.k_loop == "async"
            else (spec.vec_a, spec.vec_b))
    kpg = (spec.tile_m - 1) // a * a or a  # the largest multiple of a below tile_m
    hw = 1
    while 2 * hw * hw < 2 * MIN_SLICE_K or (2 * hw * hw) % spec.tile_k == 0:
        hw += 1  # Ho = Wo = hw (3x3, pad 1)
    return ConvProblem(N=2, C=2 * b, H=hw, W=hw, K=kpg, Y=3, X=3, stride=1, pad=1,
                       dilation=1, groups=1)


def split_degrees(spec: KernelSpec, problem) -> list[tuple[int, bool]]:
    """(degree, chosen by the policy) for each launch of ``spec`` on ``problem``, the policy's
    first: unsplit kernels run degree 1; split-K ones also ``EXPLICIT_DEGREES`` and one past
    the K tiles, each where ``serves`` admits it. A degree equal to the policy's is one
    launch (the plan is a function of the degree), so it runs once."""
    from wgradcache.wgrad.capability import serves
    from wgradcache.wgrad.split_k import plan_split_k

    policy = plan_split_k(spec, problem).degree
    out = [(policy, True)]
    if spec.reduction == "none":
        return out
    k_tiles = -(-problem.wg_K // spec.tile_k)
    for d in (*EXPLICIT_DEGREES, k_tiles + 1):
        if all(d != seen for seen, _ in out) and serves(spec, problem, d)[0]:
            out.append((d, False))
    return out


def isa_problems(spec: KernelSpec, isa: dict) -> list[str]:
    """What the variant's ISA must (not) contain; empty when it is as required.

    ``isa`` is ``compile.isa.isa_stats`` of the kernel's assembly, as stored in its entry.
    """
    out: list[str] = []

    def need(cond: bool, text: str) -> None:
        if not cond:
            out.append(text)

    f32 = isa.get("global_atomic_add_f32", 0)
    pk = {"fp16": isa.get("global_atomic_pk_add_f16", 0),
          "bf16": isa.get("global_atomic_pk_add_bf16", 0)}
    need(isa.get("mma", 0) > 0, "no MMA instruction")
    # Both K loops take one barrier per K step (the sync loop over two LDS stages); LLVM
    # drops s_barrier when the block is one wave (flat-work-group-size <= wave).
    want = 1 if spec.block_size > get_target(spec.target).wave_size else 0
    got = isa.get("main_loop_barriers", 0)
    need(got == want, f"{spec.k_loop} loop takes {got} barriers per K step, not {want}")
    if spec.k_loop == "async":
        need(isa.get("async_copies", 0) > 0, "async loop without global_load_async_to_lds")
        need(isa.get("async_waits", 0) > 0, "async loop without s_wait_asynccnt")
    else:
        need(isa.get("async_copies", 0) == 0, "sync loop issues async copies")
        need(isa.get("main_loop_exec_branches", 0) == 0 and isa.get("main_loop_saveexec", 0)
             == 0, "sync loop branches on the exec mask (predicated loads or stores)")
    if spec.reduction == "atomic":
        if spec.dw_dtype == "fp32":
            need(f32 > 0, "fp32 split-K without global_atomic_add_f32")
        else:
            need(pk[spec.dw_dtype] > 0,
                 f"16-bit split-K without global_atomic_pk_add_{spec.dw_dtype.replace('fp', 'f')}")
    elif spec.reduction == "two_stage":
        need(f32 > 0, "two-stage stage 1 without f32 workspace atomics")
    else:
        need(isa.get("global_atomics", 0) == 0, "an unsplit kernel issues atomics")
    if spec.reduction != "none":
        # Device-scope cache maintenance marks a fenced (seq_cst) atomic; the workgroup
        # fences of LDS barriers (gfx12 global_inv SCOPE_SE, gfx11 buffer_gl0_inv) do not.
        fences = (isa["device_cache_ops"] if "device_cache_ops" in isa
                  else sum(isa.get(k, 0) for k in ATOMIC_FENCES))  # entries before the key
        need(fences == 0, f"split-K atomics with {fences} device-scope fence/cache "
                          "instruction(s)")
        need(isa.get("cas_loops", 0) == 0, "split-K atomics lowered to a compare-and-swap loop")
    return out


def _walk_identities(target: str, geometries_file: str | None) -> set[str]:
    from wgradcache.jobs import default_jobdata, walk

    data = default_jobdata(geometries_file)
    return {s.identity_key() for s in walk(target, DTYPE_KEYS, None, data)}


def _expected_count(target: str, entries: list[Entry], geometries_file: str | None) -> int:
    """``count`` for the dtypes the cache holds (an fp32-dW build is opt-in)."""
    from wgradcache.jobs import count, default_jobdata

    data = default_jobdata(geometries_file)
    dtypes = sorted({e.dtype for e in entries if e.dtype in DTYPE_KEYS}
                    | set(data.default_dtypes))
    return sum(sum(v.values()) for v in count(target, dtypes, None, data).values())


def _integrity(cache: TargetCache, req: VerifyRequest, rep: VerifyReport) -> list[tuple]:
    """Returns the whole, non-stale entries (key, entry, spec, blob bytes)."""
    walked = _walk_identities(cache.target, req.geometries_file)
    good: list[tuple] = []
    referenced: set[str] = set()
    entries: list[Entry] = []
    for ik, entry in cache.iter_entries():
        rep.checked += 1
        if isinstance(entry, CorruptEntry):
            rep.failures.append(Failure(ik, "?", "integrity", str(entry)))
            continue
        label = entry.label
        blob = entry.blob
        referenced.add(blob)
        entries.append(entry)
        try:
            data = cache.read_blob(blob)
        except (FileNotFoundError, CorruptEntry) as e:  # corrupt: a symlink, 8 GB, a FIFO
            rep.failures.append(Failure(ik, label, "integrity", str(e) if isinstance(
                e, CorruptEntry) else f"blob {blob[:16]} is missing"))
            continue
        if len(data) != entry.blob_size or sha256_bytes(data) != entry.blob_sha256:
            rep.failures.append(Failure(ik, label, "integrity",
                                        f"blob {blob[:16]} does not match the size/sha256 "
                                        "its entry records"))
            continue
        if ik not in walked:
            rep.failures.append(Failure(ik, label, "integrity",
                                        "stale: the current walk does not yield this identity "
                                        "(`wgradcache gc --stale` removes it)"))
            continue
        try:
            spec = KernelSpec.from_dict(entry.identity)
        except (KeyError, TypeError) as e:
            rep.failures.append(Failure(ik, label, "integrity", f"bad identity: {e}"))
            continue
        if spec.identity_key() != ik:
            rep.failures.append(Failure(ik, label, "integrity",
                                        "identity does not hash to the entry's file name"))
            continue
        good.append((ik, entry, spec, data))
        rep.passed_cases.append((ik, label, "integrity"))
    two_stage = {(sp.dw_dtype, sp.ws_replicas) for _, _, sp, _ in good
                 if sp.reduction == "two_stage"}
    stage2 = cache.stage2_entries()
    for dw, r in sorted(two_stage):
        name = stage2_name(dw, r)
        entry = stage2.get(name)
        rep.checked += 1
        if entry is None or isinstance(entry, CorruptEntry):
            rep.failures.append(Failure(name, f"stage2 {name}", "integrity",
                                        "two-stage entries without their stage-2 kernel"
                                        if entry is None else str(entry)))
            continue
        referenced.add(entry.blob)
        try:
            data = cache.read_blob(entry.blob)
        except (FileNotFoundError, CorruptEntry):
            data = b""
        if len(data) != entry.blob_size or sha256_bytes(data) != entry.blob_sha256:
            rep.failures.append(Failure(name, f"stage2 {name}", "integrity",
                                        "stage-2 blob missing or not what its entry records"))
    for entry in stage2.values():
        if not isinstance(entry, CorruptEntry):
            referenced.add(entry.blob)
    for key in cache.blob_keys():
        if key not in referenced:
            rep.checked += 1
            rep.failures.append(Failure(key, "", "integrity",
                                        "orphan blob: no entry names it "
                                        "(`wgradcache gc --orphans` removes it)"))
    expected = _expected_count(cache.target, entries, req.geometries_file)
    n = len(entries)
    rep.targets[cache.target] = {"entries": n, "expected": expected,
                                 "missing": max(0, expected - len(good)),
                                 "complete": len(good) >= expected}
    return good


def _structure(cache: TargetCache, good: list[tuple], rep: VerifyReport) -> list[tuple]:
    from wgradcache.compile.codeobject import read_code_object

    target = get_target(cache.target)
    ok_rows = []
    for ik, entry, spec, data in good:
        label = entry.label
        problems: list[str] = []
        try:
            co = read_code_object(data)
        except ValueError as e:
            rep.failures.append(Failure(ik, label, "structure", f"not a code object: {e}"))
            continue
        if co.mach != target.e_mach:
            problems.append(f"mach 0x{co.mach:x}, expected 0x{target.e_mach:x}")
        if not co.symbol or not co.has_descriptor:
            problems.append("kernel symbol or descriptor missing")
        if co.group_segment_fixed_size != lds_bytes(spec):
            problems.append(f"LDS {co.group_segment_fixed_size} B, generator allocates "
                            f"{lds_bytes(spec)} B")
        if co.group_segment_fixed_size > target.lds_bytes:
            problems.append(f"LDS {co.group_segment_fixed_size} B exceeds the target's")
        if co.vgpr_spill_count or co.sgpr_spill_count:
            problems.append(f"spills: {co.vgpr_spill_count} VGPR, {co.sgpr_spill_count} SGPR")
        if co.private_segment_fixed_size:
            problems.append(f"scratch {co.private_segment_fixed_size} B")
        problems += isa_problems(spec, entry.isa)
        if problems:
            rep.failures.append(Failure(ik, label, "structure", "; ".join(problems)))
        else:
            rep.passed_cases.append((ik, label, "structure"))
            ok_rows.append((ik, entry, spec, data))
    return ok_rows


def _device(cache: TargetCache, req: VerifyRequest, rep: VerifyReport):
    """The HIP device numerics run on (None: the emulator), with its note; False when
    ``--device hip`` found none (a failure is recorded)."""
    from wgradcache.runtime.hip import device_for

    if req.device not in ("auto", "hip"):
        return None
    dev, why = device_for(cache.target)
    if dev is None:
        note = f"hip: no {cache.target} device ({why}); numerics ran in the emulator"
        if req.device == "hip":
            rep.failures.append(Failure("-", cache.target, "numerics",
                                        f"--device hip: no device: {why}"))
            dev = False
    else:
        note = f"hip: numerics ran on the {dev.describe()} (stored code objects)"
    if note not in rep.notes:
        rep.notes.append(note)
    return dev


def _launcher(cache: TargetCache, dev, spec: KernelSpec, entry: Entry, data: bytes,
              seed: int) -> Callable:
    """``(problem, split_k) -> report``: the stored blob (+ its stage-2 companion) on the
    device, else the emulator."""
    from wgradcache.pipeline.emulate import run_emulated

    if dev is None:
        return lambda p, d: run_emulated(spec, p, split_k=d, seed=seed)
    from wgradcache.runtime.launch import CodeObject, run_on_device, stage2_code
    from wgradcache.wgrad.kernel import kernel_symbol

    s2 = (stage2_code(cache, spec.dw_dtype, spec.ws_replicas)
          if spec.reduction == "two_stage" else None)
    code = CodeObject(data, entry.symbol or kernel_symbol(spec))
    return lambda p, d: run_on_device(dev, spec, p, code, s2, split_k=d, seed=seed)


def _run_entry(launch: Callable, spec: KernelSpec, cases: list
               ) -> tuple[list[NumericsRun], list[str]]:
    """Every (problem, degree) launch of one entry: the runs and the failed ones' reasons."""
    runs: list[NumericsRun] = []
    bad: list[str] = []
    for p in cases:
        for degree, policy in split_degrees(spec, p):
            try:
                r = launch(p, None if policy else degree)
            except Exception as e:  # a kernel that broke the emulator
                bad.append(f"{p.short()} at split {degree}: {type(e).__name__}: {e}")
                runs.append(NumericsRun(p.short(), degree, policy, False))
                continue
            runs.append(NumericsRun(p.short(), degree, policy, r.passed))
            if not r.passed:
                bad.append(r.summary())
    return runs, bad


def _numerics(cache: TargetCache, rows: list[tuple], req: VerifyRequest, rep: VerifyReport,
              advance: Callable[[int], None]) -> None:
    from wgradcache.cache.store import content_key
    from wgradcache.model.problem import ConvProblem
    from wgradcache.pipeline.build import codegen_context
    from wgradcache.wgrad.capability import serves
    from wgradcache.wgrad.emit import emit_ir

    options, toolchain, _ = codegen_context()
    problems = [ConvProblem.parse(p) for p in req.problems]
    dev = _device(cache, req, rep)
    if dev is False:
        return
    for ik, entry, spec, data in rows:
        label = entry.label
        k = emit_ir(spec)
        if content_key(k.ir_text, k.symbol, spec.target, options, toolchain) != entry.blob:
            rep.failures.append(Failure(ik, label, "numerics",
                                        "the stored binary is not this IR: re-emitted IR "
                                        "hashes to another content key"))
            rep.numerics.append(NumericsResult(ik, label, "failed"))
            advance(1)
            continue
        probe = split_probe(spec) if spec.reduction != "none" else probe_problem(spec)
        cases = [p for p in problems if serves(spec, p)[0]] if problems else [probe]
        if not cases:
            rep.numerics.append(NumericsResult(ik, label, "not_covered"))
            advance(1)
            continue
        runs, bad = _run_entry(_launcher(cache, dev, spec, entry, data, req.seed), spec,
                               cases)
        if bad:
            rep.failures.append(Failure(ik, label, "numerics", "; ".join(bad)))
        else:
            rep.passed_cases.append((ik, label, "numerics"))
        rep.numerics.append(NumericsResult(ik, label, "failed" if bad else "passed",
                                           tuple(runs)))
        advance(1)


def verify(req: VerifyRequest, advance: Callable[[int], None] | None = None,
           on_total: Callable[[int], None] | None = None) -> VerifyReport:
    if req.level not in LEVELS:
        raise ValueError(f"unknown level {req.level!r}; valid: {', '.join(LEVELS)}")
    from wgradcache.cache.catalog import cache_targets

    advance = advance or (lambda n: None)
    rep = VerifyReport()
    targets = req.targets or tuple(cache_targets(req.cache_dir))
    if not targets:
        rep.failures.append(Failure("-", "-", "integrity",
                                    f"no cache under {req.cache_dir}: nothing to verify"))
        return rep
    for t in targets:
        get_target(t)
        cache = TargetCache(req.cache_dir, t)
        good = _integrity(cache, req, rep)
        if req.level == "integrity":
            continue
        rows = _structure(cache, good, rep)
        if req.level == "numerics":
            if req.sample < 1.0:
                rng = random.Random(req.seed)
                rows = [r for r in rows if rng.random() < req.sample]
            if on_total:
                on_total(len(rows))
            _numerics(cache, rows, req, rep, advance)
    return rep


def write_junit(rep: VerifyReport, path: str | Path) -> None:
    """JUnit XML for CI: one testcase per (entry, level) checked, failures with the reason,
    not-covered entries skipped; a numerics case's system-out names its problems and
    degrees, so a CI page shows what ran."""
    import xml.etree.ElementTree as ET

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
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
