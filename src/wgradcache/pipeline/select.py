"""Which cached kernels serve a problem, ranked, with their launch shapes.

The candidates come from a built cache (its entries) or, with ``from_walk``, from the walk
(what the shipped ladder could serve). One predicate, ``capability.serves``, decides whether
a kernel computes a problem; this module only chooses among the kernels that do:

* two-stage kernels are offered for an odd wg_N (the packed atomic cannot serve it) and for
  bf16 on wave32 targets (upstream's ``--two-stage auto``), and not otherwise;
* widest-vector pruning per kind: among kernels of the same geometry, K loop, epilogue and
  reduction, only the widest global-load pair survives. Async kernels rank by their
  recorded chunk widths and form kinds of their own, so a wider sync kernel never prunes
  them (upstream lost every async kernel of a cover geometry that way);
* the rank is a model, not a measurement: waves of CTAs over the target's CUs times the
  issue slots of one CTA, partial tiles counted as full. It replaced tile area x K slice,
  which tied every candidate whose split filled the GPU (the first H200 run: the label
  broke the ties; benchmarks/select_vs_measured.py). The slots come from the kernel's own
  code object where the cache has it (``CodeFacts``: the entry's main-loop instructions
  per K tile; the epilogue's formula scaled by the same code-to-formula ratio), else from
  a formula
  (``warp_issue_per_k_tile``: MMA atoms, fragment reads, global loads and LDS stores per
  wave and K tile, from the target's atom). The code object's count is what the compiler
  made of the loop, which the formula cannot know (address arithmetic, waits, unrolling).
  A round of CTAs takes its loop's issue slots at the rate its waves can issue
  (``ISSUE_PER_WAVE``) or its LDS fragment reads (``LDS_BYTES_PER_CLOCK``), whichever is
  longer, then the epilogue. On the H200 (12-04, benchmarks/README.md): re-ranked among
  the measured kernels of eleven speed runs, select's pick is within 1.2x of the best on
  88 % of 506 layer picks (the formula alone, 2 CTAs at full rate: 72-85 % per run);
  measured fresh with this model, 85-91 % in four steady-state runs;
* a formula set by hand drifts with every kernel change (on the H100 two days later, 39-43 %
  within 1.2x: issue 33), so where the cache holds timings of a device class
  (``cache/timings.py``: ``tune`` measures them, ``tune --import`` brings them from the
  device) a kernel ranks by (1) its measured time of this problem and degree, else (2) the
  same terms weighted by the constants fitted to that class's timings (``cost_terms``,
  ``pipeline/fit.py``), else (3) the formula. ``Candidate.cost_from`` says which, and
  ``expected_ms`` the milliseconds (measured or fitted). A row of a blob the entry no
  longer names is stale and ignored;
* the formula and the fit ignore the CTA order (``spec.cta_group``): a grouped kernel and
  its row-major twin have the same grid and the same terms, so they tie and the label
  breaks the tie, the row-major one first (its label is the grouped one's prefix), until
  the device class's timings of the two rank them. Each order is its own pruning kind; so
  is each depth of the async loop's ring (``spec.stages``), which the formula ignores too
  (a -sS kernel ties with its two-stage twin and ranks after it until timings say);
* a cached kernel's split degree is the policy's (``plan_split_k``) with its code object's
  residency (``CacheCandidates.resident``: the CTAs a CU runs at once, which sm_90's
  "waves" rule reads), so the degree select prints is the one ``tune`` timed and a caller
  launches; where the class measured the kernel on the problem at degrees that serve it,
  the fastest of them instead (a measured time beats the policy's guess: a degree sweep,
  ``device_speed.py --sweep``, or rows ``tune`` timed under an earlier policy, are kept
  and used rather than made useless by a policy change);
* a depthwise problem (groups = C = K) is served by the direct depthwise kernels too
  (``serves`` admits them for nothing else), ranked by their own issue slots in the same
  clocks (``depthwise_issue_per_step``), so they rank beside the GEMM kernels that serve it;
  a small-C problem (groups = 1, C <= 4: a stem) likewise by the direct small-C kernels
  whose compiled channels and taps hold it (``small_c_issue_per_step``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

from wgradcache.kernel import mma
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import (
    KernelSpec,
    direct_kind,
    dynamic_lds_bytes,
    elem_bytes,
    is_direct,
    is_small_c,
    lds_bytes,
    loads_per_thread,
)
from wgradcache.model.targets import get_target
from wgradcache.wgrad.abi import pointer_dtypes
from wgradcache.wgrad.capability import serves
from wgradcache.wgrad.split_k import plan_split_k

__all__ = ["Candidate", "CacheCandidates", "CodeFacts", "SelectRequest", "Served", "select",
           "Measurements", "measurements", "pick_class", "DeviceClassError", "COST_TERMS",
           "cost_terms",
           "fitted_ms",
           "serve", "candidates_from_cache", "candidates_from_walk", "issue_slots",
           "lds_read_bytes_per_k_tile",
           "warp_issue_per_k_tile", "warp_issue_epilogue"]


@dataclass(frozen=True)
class CodeFacts:
    """What a built kernel's code object says about one wave's issue slots, from its cache
    entry's ``isa`` (SASS on NVIDIA, the disassembly on AMD): the main loop's instructions
    and MMA instructions per trip."""

    loop_instructions: int
    loop_mma: int

    @classmethod
    def from_isa(cls, isa: dict) -> CodeFacts | None:
        """None where the entry names no main loop with MMAs in it, or figures no compiler
        makes (more MMAs than loop instructions, a loop longer than the kernel): then the
        formula ranks the kernel. The entry's ``isa`` is already checked to map names to
        ints; the kernel's count serves that check only (``issue_slots`` says why)."""
        got = [isa.get(k) for k in ("main_loop_instructions", "main_loop_mma",
                                    "instructions")]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in got):
            return None
        loop, mma_n, total = got
        if mma_n <= 0 or not mma_n <= loop <= total:
            return None
        return cls(loop, mma_n)


@dataclass(frozen=True)
class Candidate:
    spec: KernelSpec
    key: str
    degree: int
    slice_k: int
    reduction: str
    grid: tuple[int, int, int]
    block: int
    lds_bytes: int
    workspace_bytes: int
    score: float
    # "measured": this device class's time of this kernel, problem and degree; "fitted": the
    # cost model fitted to the class's timings; "code object": the formula with the
    # kernel's own main-loop counts (CodeFacts); "formula": the formula alone
    cost_from: str = "formula"
    expected_ms: float | None = None  # measured or fitted; None for the formula (clocks)
    # "policy": the split rule's degree; "measured": the fastest degree the class measured
    degree_from: str = "policy"

    def to_json(self) -> dict:
        return {"label": self.spec.label(), "key": self.key, "split_k": self.degree,
                "slice_k": self.slice_k, "reduction": self.reduction, "grid": list(self.grid),
                "block": self.block, "lds_bytes": self.lds_bytes,
                "dynamic_lds_bytes": dynamic_lds_bytes(self.spec),
                "workspace_bytes": self.workspace_bytes, "score": round(self.score, 6),
                "cost_from": self.cost_from, "degree_from": self.degree_from,
                "expected_ms": None if self.expected_ms is None else round(self.expected_ms, 6)}


def candidates_from_walk(target: str, dtype_key: str,
                         geometries_file: str | None = None) -> list[KernelSpec]:
    from wgradcache.jobs import default_jobdata, walk

    return list(walk(target, [dtype_key], None, default_jobdata(geometries_file)))


@dataclass(frozen=True)
class CacheCandidates:
    """The specs of a cache's servable entries of one dtype, one line per entry that is not
    servable, and each servable entry's ``CodeFacts`` (by identity key) where it has them."""

    specs: list[KernelSpec]
    skipped: list[str]
    facts: dict[str, CodeFacts]
    blobs: dict[str, str] = field(default_factory=dict)  # identity key -> its blob key
    # identity key -> CTAs per CU its code object allows (``Backend.resident_ctas``)
    resident: dict[str, int] = field(default_factory=dict)

    def costs(self, measured: Measurements | None = None) -> CostSources:
        """What ranks these candidates besides the formula: their code objects' counts and
        residency, and ``measured``'s timings where given."""
        return CostSources(self.facts, measured or Measurements(), self.resident)


def candidates_from_cache(cache_dir: str, target: str, dtype_key: str) -> CacheCandidates:
    """The entries of ``dtype_key`` that can be served, and one line per entry that cannot
    (not whole, its blob not the bytes it records, or a two-stage entry whose stage-2 kernel
    is missing or not its bytes: never served)."""
    from wgradcache.cache.store import CorruptEntry, TargetCache
    from wgradcache.model.backends import backend_of

    out, skipped, facts, blobs, resident = [], [], {}, {}, {}
    cache = TargetCache(cache_dir, target)
    backend = backend_of(target)
    for _ik, entry in cache.iter_entries():
        if not isinstance(entry, CorruptEntry) and entry.dtype != dtype_key:
            continue
        why = cache.unusable(entry) or cache.companion_unusable(entry)
        if why:
            skipped.append(why)
            continue
        spec = KernelSpec.from_dict(entry.identity)
        out.append(spec)
        blobs[entry.identity_key] = entry.blob
        got = CodeFacts.from_isa(entry.isa)
        if got is not None:
            facts[spec.identity_key()] = got
        ctas = backend.resident_ctas(entry.code_object, target)
        if ctas is not None:
            resident[spec.identity_key()] = ctas
    return CacheCandidates(out, skipped, facts, blobs, resident)


def _two_stage_wanted(spec: KernelSpec, problem: ConvProblem) -> bool:
    wave32 = get_target(spec.target).wave_size == 32
    return problem.wg_N % 2 == 1 or (spec.dtype == "bf16" and wave32)


ISSUE_PER_CU = 4  # warp instructions one CU/SM issues per clock (4 SIMDs / 4 SMSPs)
RESIDENT_CTAS = 2  # CTAs a CU runs at once, in the model
# Warp instructions one wave issues per clock, on average: a CU reaches ISSUE_PER_CU only with
# RESIDENT_CTAS x waves x ISSUE_PER_WAVE >= 4, so a one- or two-wave CTA leaves issue slots
# idle. Why: on the H200 (12-04, seven speed runs) one-wave CTAs ran 1.3x slower per modelled
# slot than four-wave ones; 0.5 and 0.75 rank the same, 1.0 (no idle slots) loses 4-20
# points of picks within 1.2x on the runs whose candidates include small CTAs.
ISSUE_PER_WAVE = 0.5
# Shared memory (LDS) bytes a CU delivers per clock: 32 banks x 4 B on NVIDIA SMs (CUDA C++
# Programming Guide, "Shared Memory") and on AMD CUs (the CDNA3 / RDNA ISA guides: 32 banks
# of dwords). A round takes at least its CTAs' fragment reads over it: eight waves of 16x32
# warp tiles read as many bytes per K tile as four of 64x32 for half the MACs, and on the
# H200 (12-04) picked 64x64 w4x2 tiles ran 1.3x slower than 128x64 w2x2 ones the issue count
# ranked below them. Counting the tile's LDS stores too ranked worse (the reads dominate).
LDS_BYTES_PER_CLOCK = 128
# Per K tile and wave, besides the atoms and the memory ops: the one barrier and the loop's
# branch. Without it a tile_k 64 kernel cost exactly two tile_k 32 iterations, and on the
# H200 (12-04) t64x64x64 beat its t64x64x32 twin on the 7x7 layers by 1.2-1.3x.
LOOP_SLOTS = 2


def _warp_atoms(spec: KernelSpec) -> tuple[int, int]:
    """MMA atoms along M and N of one wave's warp tile."""
    atom = get_target(spec.target).atoms[spec.dtype]
    return (-(-(spec.tile_m // spec.warp_m) // atom.m),
            -(-(spec.tile_n // spec.warp_n) // atom.n))


def warp_issue_per_k_tile(spec: KernelSpec) -> float:
    """Warp instructions one wave issues per K tile, from the target's MMA atom: the atoms
    of its warp tile, one fragment read per atom row and column per k-step, per global
    vector a load plus (sync loop) its LDS store, and ``LOOP_SLOTS``. Why: a CTA's time is
    the slots its waves take, not its tile area; at equal MACs, more waves over the same
    tile (16x16 warp tiles) or narrower loads cost more slots, which the H200 run measured
    (a 32x32 tile on 4 waves 1.7x slower than on one)."""
    t = get_target(spec.target)
    am, an = _warp_atoms(spec)
    steps = -(-spec.tile_k // t.atoms[spec.dtype].k)
    per_vec = 1 if spec.k_loop == "async" else 2  # the copy writes LDS itself
    loads = loads_per_thread(spec.tile, spec.load_widths)
    return steps * (am * an + am + an) + per_vec * loads + LOOP_SLOTS


# Epilogue issue slots per f32 accumulator a lane holds: the default epilogue converts and
# stores (or adds) each, about one instruction; cshuffle also writes it to LDS and reads it
# back. Fitted on nothing but that count; without it every cshuffle kernel tied with its
# default twin and won the tie by name (cshuffle < default): on the H200's two runs of
# 12-04 (92 layer picks) 75 % -> 80 % within 1.2x of the best measured, geomean 1.16 -> 1.13.
EPILOGUE_SLOTS = {"default": 1, "cshuffle": 3}


def warp_issue_epilogue(spec: KernelSpec) -> int:
    """Warp instructions one wave issues in the epilogue (``EPILOGUE_SLOTS`` per
    accumulator element of its warp tile's atoms)."""
    t = get_target(spec.target)
    atom = t.atoms[spec.dtype]
    am, an = _warp_atoms(spec)
    return EPILOGUE_SLOTS[spec.epilogue] * am * an * atom.m * atom.n // t.wave_size


def lds_read_bytes_per_k_tile(spec: KernelSpec) -> int:
    """Bytes one CTA's waves read from LDS per K tile: each wave, each k-step, one A
    fragment per atom row and one B fragment per atom column of its warp tile."""
    atom = get_target(spec.target).atoms[spec.dtype]
    am, an = _warp_atoms(spec)
    steps = -(-spec.tile_k // atom.k)
    per_wave = steps * (am * atom.m + an * atom.n) * atom.k * elem_bytes(spec.dtype)
    return spec.warp_m * spec.warp_n * per_wave


def _mma_per_k_tile(spec: KernelSpec) -> int:
    """MMA instructions one wave issues per K tile: its atoms x k-steps x the instructions
    of one atom (two m16n8k16 on NVIDIA, ``mma.MmaIntrinsic.instructions``)."""
    t = get_target(spec.target)
    atom = t.atoms[spec.dtype]
    am, an = _warp_atoms(spec)
    elem = pointer_dtypes(spec.dtype, spec.dw_dtype)["x"]  # the A/B element, as the IR has it
    return am * an * -(-spec.tile_k // atom.k) * mma.intrinsic(atom.form, elem).instructions


def issue_slots(spec: KernelSpec, facts: CodeFacts | None = None) -> tuple[float, float]:
    """(slots per K tile, slots of the epilogue) of one wave: ``warp_issue_per_k_tile`` and
    ``warp_issue_epilogue``, or where ``facts`` are given, the code object's main loop
    scaled to one K tile (the compiler may unroll it: its MMA count says by how much) and
    the epilogue formula scaled by the same code-to-formula ratio. Why not the code's own
    count outside the loop: it is static, and cshuffle's copy loops run many times for
    each instruction listed (counted as listed, every cshuffle kernel ranked first and ran
    1.1-1.8x slower than the best: H200 run of 12-04 15:00)."""
    formula_tile, formula_epi = warp_issue_per_k_tile(spec), warp_issue_epilogue(spec)
    if facts is None:
        return formula_tile, formula_epi
    per_tile = facts.loop_instructions * _mma_per_k_tile(spec) / facts.loop_mma
    return per_tile, formula_epi * per_tile / formula_tile


def _score(spec: KernelSpec, problem: ConvProblem, slice_k: int, grid: tuple[int, int, int],
           facts: CodeFacts | None = None) -> float:
    """Rounds of ``RESIDENT_CTAS`` CTAs per CU over the grid, times one round's clocks: its
    waves x K tiles x slots per K tile (``issue_slots``) over the rate the round's waves can
    issue at (``ISSUE_PER_WAVE`` each, ``ISSUE_PER_CU`` at most), or its fragment reads over
    ``LDS_BYTES_PER_CLOCK`` where those take longer, then the epilogue's slots at the same
    rate; partial tiles count as full. Two-stage adds its stage-2 pass (10 %). The parts
    are ``cost_terms``'s, which a fit weighs by measured constants instead."""
    t = cost_terms(spec, problem, slice_k, grid, facts)  # the hand-set residency: see there
    stage2 = 1.1 if spec.reduction == "two_stage" else 1.0
    return (max(t["issue"], t["lds"]) + t["epilogue"]) * stage2


COST_TERMS = ("launch", "issue", "lds", "epilogue", "stage2", "l2")
"""The cost model's terms, each a count the fitted constant turns into milliseconds:
``launch`` 1 per launch (its fixed cost), ``issue`` and ``lds`` the rounds x one round's
loop clocks of ``_score`` at the issue rate and at the LDS rate (the formula takes the
larger; a fit weighs both), ``epilogue`` the rounds x the epilogue's clocks, ``stage2``
the workspace elements stage 2 reads (two-stage only), ``l2`` the bytes of the sectors
the CTAs' loads touch (``operand_sectors_per_k_tile``; the formula leaves it out)."""

FIT_NEEDS = "l2"
"""Every launch has an ``l2`` term, so a stored fit without its constant is of the model
before it (files of before 2026-12-08): ``measurements`` ignores it until a refit."""


def cost_terms(spec: KernelSpec, problem: ConvProblem, slice_k: int,
               grid: tuple[int, int, int], facts: CodeFacts | None = None,
               resident: int | None = None) -> dict[str, float]:
    """The value of each of ``COST_TERMS`` for one launch: the parts ``_score`` combines
    by its hand-set rates, kept apart so a least-squares fit to measured times
    (``pipeline/fit.py``) sets one constant per part.

    ``resident``: the CTAs a CU runs at once by the code object (``Backend.resident_ctas``,
    ``CacheCandidates.resident``), ``RESIDENT_CTAS`` where it is not known. Why: a 236-
    register sm_90 kernel runs 2 CTAs an SM and a 64-register one 8; with one residency
    for all, the fit to the H100's rows kept ranking the 4-warp 236-register kernel first,
    1.3-2.3x slower than the best on a third of the ResNet-50 pairs. The formula's hand-set
    rates keep ``RESIDENT_CTAS``: with the code objects' residency they ranked worse on the
    same rows (within 1.2x of the best on 49 % of pairs, geomean 1.32, against 47 %, 1.28)."""
    t = get_target(spec.target)
    ctas = grid[0] * grid[1] * grid[2]
    per_cu = resident or RESIDENT_CTAS
    rounds = -(-ctas // (per_cu * t.cu_count))
    k_tiles = -(-slice_k // spec.k_step)
    if is_direct(spec):  # no MMA, no LDS in its loop (k_tiles: its CTA steps)
        (per_tile, epilogue), lds_per_tile = _direct_slots(spec), 0
    else:
        per_tile, epilogue = issue_slots(spec, facts)
        lds_per_tile = lds_read_bytes_per_k_tile(spec)
    resident_waves = per_cu * spec.warp_m * spec.warp_n
    rate = min(ISSUE_PER_CU, resident_waves * ISSUE_PER_WAVE)
    replicas = spec.ws_replicas if spec.reduction == "two_stage" else 0
    return {"launch": 1.0,
            "issue": rounds * resident_waves * k_tiles * per_tile / rate,
            "lds": rounds * per_cu * k_tiles * lds_per_tile / LDS_BYTES_PER_CLOCK,
            "epilogue": rounds * resident_waves * epilogue / rate,
            "stage2": float(problem.groups * replicas * problem.wg_M * problem.wg_N),
            "l2": float(ctas * k_tiles * operand_sectors_per_k_tile(spec, problem)
                        * SECTOR_BYTES)}


SECTOR_BYTES = 32
"""The unit a load moves between L2 and an SM (NVIDIA's 32-byte sector; the size of a
gfx9/gfx12 L2-to-L1 request of a dword per lane over 8 lanes, too)."""


def operand_sectors_per_k_tile(spec: KernelSpec, problem: ConvProblem) -> int:
    """Sectors one CTA's loads touch per K tile (a direct kernel's CTA step): the reduction
    runs over pixels, so each of its ``tile_k`` rows is a separate run of memory, and a run
    of n elements takes ceil(n · bytes / 32) sectors. A GEMM tile's A row is the useful M
    rows (kpg, at most tile_m) of one pixel's dY, its B row one run per filter tap of the
    useful N columns (cpg channels each, contiguous in NHWC); a direct kernel reads per
    position its channel block of dY and of X at each tap. Why: the issue slots count a
    vector load as one slot whatever it moves, so a GEMM tile on a depthwise layer (kpg =
    cpg = 1: a 32-byte sector for 2 useful bytes) looked cheap, and a tile moving fewer
    bytes per MAC did not look faster (each byte passes L2 and the SM's L1/shared-memory
    path, which Nsight Compute finds 58-78 % busy on the large layers). On the H100's
    graph-timed rows (12-07, 4320 rows, fp16 and bf16), with the non-negative fit, the
    held-out ranking (fit on two networks, rank the others' measured launches) met issue
    33's goal (85 % within 1.2x of the best, geomean <= 1.10) on 6 of 7 two-network splits,
    against 1 of 7 without the term (benchmarks/README.md)."""
    eb = elem_bytes(spec.dtype)

    def sectors(n: int) -> int:
        return -(-n * eb // SECTOR_BYTES)

    if is_direct(spec):
        taps = problem.Y * problem.X
        if is_small_c(spec):  # dY: tile_n output channels; X: C (<= 4) channels a tap
            return spec.tile_k * (sectors(min(spec.tile_n, problem.K))
                                  + taps * sectors(problem.cpg))
        # per run of R columns (1: a position) R dY vectors and Y x (X + R - 1) pixels
        pixels = problem.Y * (problem.X + spec.wo_run - 1)
        return spec.tile_k * (spec.wo_run + pixels) * sectors(min(spec.tile_n, problem.C))
    m, n = min(spec.tile_m, problem.wg_M), min(spec.tile_n, problem.wg_N)
    run = min(problem.cpg, n)
    return spec.tile_k * (sectors(m) + -(-n // run) * sectors(run))


# The direct depthwise kernel (``wgrad/depthwise.py``), per thread and reduction position:
# the position's decode and its dY load, then per tap its pixel's bound and offset, the
# bounded load and, per channel, a convert and an FMA. Set to the sm_90 code objects' main
# loops (12-07, compile --json: 163, 192, 369, 446 and 671 instructions for 3x3 v1, 3x3 v2,
# 5x5 v1, 5x5 v2 and 7x7 v1; the formula gives 162, 189, 370, 445 and 682; gfx1250's
# buffer loads check the range themselves: 116, 145, 223, 337, 408); its code object names
# no MMA, so the formula ranks it (``CodeFacts.from_isa``).
DEPTHWISE_POSITION_SLOTS = 45
DEPTHWISE_TAP_SLOTS = 10
DEPTHWISE_CHANNEL_SLOTS = 3
# Per dW element a thread reduces in the epilogue (besides one LDS read per thread row):
# the flat index's division by Y·X and the magic one by X, the LDS address, the store.
DEPTHWISE_ELEMENT_SLOTS = 40


# A run of R > 1 output columns (``KernelSpec.wo_run``) adds per further column its dY
# load (address, bound, load, convert), per tap row one more pixel (a tap's slots and a
# convert per channel) and per tap and channel one FMA. Set to the sm_90 main loops
# (12-07, compile: 3x3 v4 208 -> 479 instructions at R 4, 3x3 v8 298 -> 441 at R 2, 5x5 v4
# 498 -> 704 at R 2, 5x5 v2 446 -> 739 at R 4; the formula gives 501, 485, 773, 799).
DEPTHWISE_RUN_SLOTS = 8


def depthwise_issue_per_step(spec: KernelSpec) -> int:
    """Warp instructions of one CTA step (one reduction position, or one run of ``wo_run``
    columns, per thread) of a depthwise kernel."""
    t, vec, more = spec.tile_m, spec.vec_b, spec.wo_run - 1
    return (DEPTHWISE_POSITION_SLOTS
            + t * t * (DEPTHWISE_TAP_SLOTS + DEPTHWISE_CHANNEL_SLOTS * vec)
            + more * (DEPTHWISE_RUN_SLOTS + t * (DEPTHWISE_TAP_SLOTS + vec) + t * t * vec))


# The direct small-C kernel (``wgrad/small_c.py``), per thread and reduction position: the
# position's decode and dY load (DEPTHWISE_POSITION_SLOTS, the same code), per tap its
# pixel's bound and offset, per channel its scalar load, bound and convert, and per channel
# and k an FMA. Set to the sm_90 code objects' main loops (compile --json: 250, 318 and 376
# instructions for 3x3 C 3 at vec 1, 2 and 4, 304 for C 4 vec 1, 341 for C 4 vec 2, 622 for
# 5x5 C 3 vec 1; the formula gives 252, 306, 414, 306, 378 and 620).
SMALL_C_TAP_SLOTS = 5
SMALL_C_LOAD_SLOTS = 4
SMALL_C_FMA_SLOTS = 2


def small_c_issue_per_step(spec: KernelSpec) -> int:
    """Warp instructions of one CTA step (one reduction position per thread) of a small-C
    kernel: vec_b = Cc channels per tap, vec_a k per thread."""
    taps = spec.tile_m * spec.tile_m
    return (DEPTHWISE_POSITION_SLOTS + taps * (
        SMALL_C_TAP_SLOTS + spec.vec_b * (SMALL_C_LOAD_SLOTS + SMALL_C_FMA_SLOTS * spec.vec_a)))


def _direct_slots(spec: KernelSpec) -> tuple[int, int]:
    """A direct kernel's issue slots per CTA step and of its epilogue, the LDS row
    reduction (``cost_terms`` turns them into its terms at its rates): one LDS store per
    accumulator vector, then per dW element a thread sums its decode and the rows."""
    vectors = spec.tile_m * spec.tile_m * direct_kind(spec).per_tap
    per_thread = -(-vectors * spec.tile_n // spec.block_size)
    step = small_c_issue_per_step(spec) if is_small_c(spec) else depthwise_issue_per_step(spec)
    return step, vectors + per_thread * (DEPTHWISE_ELEMENT_SLOTS + spec.tile_k)


def fitted_ms(constants: dict[str, float], terms: dict[str, float]) -> float | None:
    """The fitted model's milliseconds for a launch's ``terms``; None where a term the
    launch has was not fitted (no measured launch had it: the fit knows nothing of it), or
    where the fit, unconstrained, comes out at no time at all (a launch far outside what it
    was fitted on: it would rank first for no reason)."""
    if any(v and name not in constants for name, v in terms.items()):
        return None
    ms = sum(constants.get(name, 0.0) * v for name, v in terms.items())
    return ms if ms > 0 else None


def _prune_widest(specs: list[KernelSpec]) -> list[KernelSpec]:
    best: dict[tuple, tuple[tuple[int, int, int], list[KernelSpec]]] = {}
    for s in specs:
        # a small-C kernel's vec_b is its compiled channel count, not a load width: a
        # C 4 kernel does a third more work on a C 3 layer than its C 3 twin
        kind = (s.geometry, s.k_loop, s.epilogue, s.reduction, s.cta_group, s.stages,
                s.vec_b if is_small_c(s) else 0)
        rank = (s.load_vec_a + s.load_vec_b, s.load_vec_a, s.load_vec_b)
        cur = best.get(kind)
        if cur is None or rank > cur[0]:
            best[kind] = (rank, [s])
        elif rank == cur[0]:
            cur[1].append(s)
    return [s for _, group in best.values() for s in group]


@dataclass(frozen=True)
class Measurements:
    """One device class's timings as select ranks by them: the median ms of each current
    row by (identity key, problem, dtype, degree), the fitted constants (empty: no fit) and
    the fit's per-kernel factors (``cache.timings.Fit.factors``). Rows of another blob than
    the entry's are stale and were left out."""

    device_class: str = ""
    times: dict[tuple[str, str, str, int], float] = field(default_factory=dict)
    constants: dict[str, float] = field(default_factory=dict)
    factors: dict[str, float] = field(default_factory=dict)

    @cached_property
    def _by_launch(self) -> dict[tuple[str, str, str], dict[int, float]]:
        out: dict[tuple[str, str, str], dict[int, float]] = {}
        for (key, problem, dtype, degree), ms in self.times.items():
            out.setdefault((key, problem, dtype), {})[degree] = ms
        return out

    def degrees(self, key: str, problem: str, dtype: str) -> dict[int, float]:
        """Each measured degree's time of kernel ``key`` on ``problem`` in ``dtype``."""
        return self._by_launch.get((key, problem, dtype), {})


@dataclass(frozen=True)
class CostSources:
    """What ranks a kernel besides the formula: ``facts`` (``CacheCandidates.facts``), the
    code objects' counts by identity key, and ``measured``, a device class's timings and
    fit. Empty: every kernel by the formula."""

    facts: dict[str, CodeFacts] = field(default_factory=dict)
    measured: Measurements = field(default_factory=Measurements)
    resident: dict[str, int] = field(default_factory=dict)  # CacheCandidates.resident


def select(target: str, problem: ConvProblem, specs: list[KernelSpec],
           prune: bool = True, costs: CostSources | None = None) -> list[Candidate]:
    """Rank the kernels among ``specs`` that serve ``problem`` on ``target`` by ``costs``.

    A kernel's cost is (1) its measured time of this problem (at its fastest measured
    degree) on the class, else (2) the fitted model's milliseconds, else (3) the formula's
    clocks, and they rank in that order: a measured kernel before a fitted one, a fitted one
    before the formula's. A fit is a guess with a residual (0.28 RMS on the H100's rows), and
    the least of a hundred guesses is an optimistic one: ranked together with the measured
    times it picked an unmeasured kernel over the measured best on 14 of 51 ResNet-50 pairs.
    Where nothing of the problem was measured, the fit ranks every kernel (a tune times
    select's top N: what it did not time, the ranking of that time put lower)."""
    costs = costs or CostSources()
    facts, measured = costs.facts, costs.measured
    served = []
    for s in specs:
        if s.target != target or not serves(s, problem)[0]:
            continue
        if s.reduction == "two_stage" and not _two_stage_wanted(s, problem):
            continue
        served.append(s)
    if prune:
        served = _prune_widest(served)
    out = []
    for s in served:
        key = s.identity_key()
        resident = costs.resident.get(key)
        plan = plan_split_k(s, problem, resident_ctas=resident)
        timed = {d: ms for d, ms in measured.degrees(key, problem.short(), s.dtype_key).items()
                 if serves(s, problem, d)[0]}
        degree_from = "policy"
        if timed and (fastest := min(timed, key=lambda d: (timed[d], d))) != plan.degree:
            plan, degree_from = plan_split_k(s, problem, split_k=fastest), "measured"
        if not serves(s, problem, plan.degree)[0]:
            continue
        code = facts.get(key)
        cost_from = "formula" if code is None else "code object"
        ms = timed.get(plan.degree)
        if ms is not None:
            cost_from = "measured"
        elif measured.constants:
            ms = fitted_ms(measured.constants,
                           cost_terms(s, problem, plan.slice_k, plan.grid, code, resident))
            if ms is not None:
                ms, cost_from = ms * measured.factors.get(key, 1.0), "fitted"
        out.append(Candidate(spec=s, key=key, degree=plan.degree,
                             slice_k=plan.slice_k, reduction=plan.reduction, grid=plan.grid,
                             block=s.block_size, lds_bytes=lds_bytes(s),
                             workspace_bytes=plan.workspace_bytes,
                             score=_score(s, problem, plan.slice_k, plan.grid, code),
                             cost_from=cost_from, expected_ms=ms, degree_from=degree_from))
    tier = {"measured": 0, "fitted": 1}
    out.sort(key=lambda c: (tier.get(c.cost_from, 2),
                            c.score if c.expected_ms is None else c.expected_ms,
                            c.spec.label()))
    return out


@dataclass(frozen=True)
class SelectRequest:
    """``wgradcache select``'s options: where candidates come from and how they are ranked."""

    target: str
    problem: ConvProblem
    dtype: str = "fp16"
    from_walk: bool = False
    all_widths: bool = False  # keep every vector width (no pruning)
    geometries_file: str | None = None
    cache_dir: str = "cache"
    device_class: str | None = None  # whose timings rank (None: the cache's only class)


@dataclass(frozen=True)
class Served:
    """What ``serve`` found: the candidates, best first, and the entries it skipped (one
    line each, naming the file and why), which a caller must report: a corrupt entry is
    not served, but it is not silently forgotten either."""

    candidates: list[Candidate]
    skipped: list[str]

    def skipped_line(self) -> str:
        """One line for stderr, or "" when nothing was skipped."""
        if not self.skipped:
            return ""
        return (f"select: skipped {len(self.skipped)} corrupt entr"
                f"{'y' if len(self.skipped) == 1 else 'ies'} (not served), e.g. "
                f"{self.skipped[0]} (`wgradcache verify` lists them, `wgradcache build` "
                "mends them)")


class DeviceClassError(ValueError):
    """``--device-class`` names no class of the cache, or the cache has several and none
    was named: one line listing them (the CLI exits 2)."""


def pick_class(cache, device_class: str | None) -> str | None:
    """The device class whose timings a command reads: ``device_class`` when the cache
    (a ``TargetCache``) has timings of it, else the cache's only class, None when it has
    none; DeviceClassError when it has several and none was named, or not the one named.
    Unnamed, a host-timed class is passed over where the same device has a graph-timed
    class (``_superseded_left_out``)."""
    classes = cache.timing_classes()
    if device_class is None:
        if len(classes) > 1:
            classes = _superseded_left_out(cache, classes)
        if len(classes) > 1:
            raise DeviceClassError(f"the {cache.target} cache has timings of {len(classes)} "
                                   f"device classes ({', '.join(classes)}): name one with "
                                   "--device-class")
        return classes[0] if classes else None
    if device_class not in classes:
        raise DeviceClassError(f"--device-class {device_class[:60]!r}: no timings of it in "
                               f"the {cache.target} cache (it has: "
                               f"{', '.join(classes) or 'none'})")
    return device_class


def _superseded_left_out(cache, classes: list[str]) -> list[str]:
    """``classes`` without each host-timed class whose device has a graph-timed class too
    (``DeviceClass.timing``): a re-tune of the same device by graph replay supersedes the
    rows timed from the host, which timed the host for short kernels."""
    devices = {}
    for slug in classes:
        tf = cache.read_timings(slug)
        if tf is not None:
            devices[slug] = tf.device
    graphed = {replace(d, timing="") for d in devices.values() if d.timing}
    return [s for s in classes if s not in devices or devices[s].timing
            or devices[s] not in graphed]


def measurements(cache_dir: str, target: str, device_class: str | None,
                 blobs: dict[str, str]) -> Measurements:
    """The timings select ranks by: of ``device_class``, else of the cache's only class
    (none: empty). ``blobs``: identity key -> the entry's blob; a row of another blob is
    stale and left out. A timings file that is not whole raises its CorruptEntry."""
    from wgradcache.cache.store import TargetCache
    from wgradcache.cache.timings import row_is_current

    cache = TargetCache(cache_dir, target)
    device_class = pick_class(cache, device_class)
    if device_class is None:
        return Measurements()
    tf = cache.read_timings(device_class)
    if tf is None:
        return Measurements(device_class)
    times = {(r.identity_key, r.problem, r.dtype, r.degree): r.median_ms
             for r in tf.rows if row_is_current(r, blobs)}
    if tf.fit is None or FIT_NEEDS not in tf.fit.constants:
        return Measurements(device_class, times)
    # a factor describes the code its rows timed: a kernel rebuilt since (no current row
    # left) runs other code, so its factor is dropped until a refit
    timed = {key for key, _, _, _ in times}
    factors = {k: f for k, f in tf.fit.factors.items() if k in timed}
    return Measurements(device_class, times, dict(tf.fit.constants), factors)


def serve(req: SelectRequest) -> Served:
    """Every kernel that serves the request's problem, best first. A corrupt entry of
    another dtype is skipped too: its dtype cannot be trusted."""
    measured = Measurements()
    if req.from_walk:
        got = CacheCandidates(candidates_from_walk(req.target, req.dtype,
                                                   req.geometries_file), [], {})
    else:
        got = candidates_from_cache(req.cache_dir, req.target, req.dtype)
        measured = measurements(req.cache_dir, req.target, req.device_class, got.blobs)
    return Served(select(req.target, req.problem, got.specs, prune=not req.all_widths,
                         costs=got.costs(measured)), got.skipped)
