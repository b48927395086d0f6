"""KernelSpec: what one cached kernel is, its identity, its label, and the rules it must obey.

Every rule about what a target admits lives here as a small predicate returning
``(ok, reason)``. The walk (``jobs.walk``), the closed-form ``jobs.count``, the validator
below and ``select`` call the same predicates, so they can never disagree about a job.

The ladder budgets (``Limits``) are the job data's, never read here: every caller passes the
budgets of the geometries file it walks, or ``None`` for the rules alone (what the generator
needs to emit a correct kernel: a kernel over a budget spills, it does not compute wrong).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, fields

from wgradcache.model.targets import Target, get_target

__all__ = [
    "AB_DTYPES", "DW_DTYPES", "DTYPE_KEYS", "K_LOOPS", "EPILOGUES", "REDUCTIONS",
    "VARIANT_KEYS", "ASYNC_CHUNK_BYTES", "LDS_ROW_PAD", "sync_row_pad", "sync_k_outer",
    "spec_sync_k_outer",
    "DEFAULT_WS_REPLICAS",
    "KernelSpec", "Limits", "DEFAULT_LIMITS", "Geometry", "Tile", "LoadWidths",
    "parse_dtype_key", "dtype_key",
    "elem_bytes", "lds_bytes", "lds_bytes_for", "dynamic_lds_bytes", "sync_stages",
    "accumulators_per_lane", "lds_fits",
    "load_widths_ok", "loads_fit", "loads_per_thread",
    "geometry_fits", "reduction_admitted", "store_vector_ok", "k_loop_admitted",
    "validate", "from_label", "geometry_tag", "SPEC_SCHEMA", "identity_key_of",
    "CTA_GROUP_RANGE", "IDENTITY_DEFAULTS", "cta_order_fits", "cta_groups_for",
    "DEPTHWISE", "DEPTHWISE_VARIANTS", "DEPTHWISE_TAPS", "is_depthwise",
    "depthwise_lds_bytes", "depthwise_accumulators",
    "SMALL_C", "SMALL_C_VARIANTS", "SMALL_C_CHANNELS", "is_small_c", "is_direct",
    "direct_accumulators", "direct_lds_bytes", "DirectKind", "direct_kind",
    "STAGE_RANGE", "async_ring_stages", "stages_fit", "stages_for", "ASYNC_COUNT_MAX", "WO_RUNS",
    "async_copies_per_tile", "ring_wait_depth",
]

AB_DTYPES = ("fp16", "bf16")
DW_DTYPES = ("fp16", "bf16", "fp32")
# A dtype key names the A/B dtype and, when it differs, the dW dtype: "fp16", "fp16_f32".
DTYPE_KEYS = ("fp16", "bf16", "fp16_f32", "bf16_f32")
K_LOOPS = ("sync", "async")
EPILOGUES = ("default", "cshuffle")
REDUCTIONS = ("none", "atomic", "two_stage")
# The direct depthwise kernel (groups = C = K): its ``k_loop`` names its loop, which streams
# X and dY per channel block instead of feeding an MMA tile (``wgrad/depthwise.py``).
DEPTHWISE = "depthwise"
DEPTHWISE_VARIANTS = (f"{DEPTHWISE}.default.none", f"{DEPTHWISE}.default.atomic",
                      f"{DEPTHWISE}.default.two_stage")
# The direct small-C kernel (groups = 1, C <= 4: network stems), where GEMM N = C·Y·X is
# 27 and the reduction N·Ho·Wo huge (``wgrad/small_c.py``); the depthwise kernel's shape.
SMALL_C = "small_c"
SMALL_C_VARIANTS = (f"{SMALL_C}.default.none", f"{SMALL_C}.default.atomic")
VARIANT_KEYS = tuple(f"{k}.{e}.{r}" for k in K_LOOPS for e in EPILOGUES
                     for r in REDUCTIONS) + DEPTHWISE_VARIANTS + SMALL_C_VARIANTS
DEPTHWISE_TAPS = (1, 9)  # the compiled filter side T of a direct kernel (taps T x T)
SMALL_C_CHANNELS = (1, 4)  # the compiled channel count Cc of a small-C kernel (its vec_b)
ASYNC_CHUNK_BYTES = (4, 8, 16)
VEC_WIDTHS = (1, 2, 4, 8)
LDS_ROW_PAD = 8  # elements added to each K-outer LDS row (bank spread; upstream's pad)
DEFAULT_WS_REPLICAS = 8
SPEC_SCHEMA = 1  # bump when the meaning of a field changes: every identity key changes with it
# Tile-rows per group of the grouped CTA order (``cta_group``); 1 is the row-major order.
CTA_GROUP_RANGE = (1, 64)
# Fields added after identities were first written: ``canonical`` leaves each out at its
# default, so every kernel that existed before the field keeps its identity key (and label).
IDENTITY_DEFAULTS: dict[str, int] = {"cta_group": 1, "stages": 2, "wo_run": 1}
# Consecutive output columns one depthwise thread takes a step (``wo_run``): their taps
# share X pixels, loaded once (``depthwise.py``); 1 is every kernel before the field.
WO_RUNS = (1, 2, 4)
# (tile_m, tile_n, tile_k, warp_m, warp_n): a label's t..-w.. part, a ladder's point
Geometry = tuple[int, int, int, int, int]
# LDS stages of the async K loop's ring (``stages``): 2 is the ping-pong of every kernel
# before the field; up to 4 (three tiles of copies in flight) where the LDS holds them.
STAGE_RANGE = (2, 4)
# The largest count an async wait names (gfx1250's s_wait_asynccnt; the IR's verify holds
# every wait count below 64, the 6 bits of gfx12's counters). A ring whose tiles in flight
# issue more copies waits for this many: more than it needs, never less.
ASYNC_COUNT_MAX = 63


@dataclass(frozen=True)
class Limits:
    """Ladder budgets shared by the walk and the validator (a geometries file's filters,
    per target: ``JobData.limits_for``)."""

    max_acc_per_lane: int = 64
    max_block_size: int = 256
    min_block_size: int = 32
    max_k_steps: int = 2  # MMA k-steps per tile_k (their fragments are live at once)
    max_loads_per_thread: int = 40  # global loads per thread per K tile (both operands)
    # (tile_m, tile_n, tile_k, warp_m, warp_n, vec_a, vec_b) a full build measured to keep
    # a stack frame, where no budget separates them from their neighbours (geometries.yaml)
    exclude: tuple[tuple[int, int, int, int, int, int, int], ...] = ()
    # (tile_m, tile_n, tile_k, warp_m, warp_n, chunk_a, chunk_b) alike, of the async loop
    # (chunks in bytes)
    exclude_async: tuple[tuple[int, int, int, int, int, int, int], ...] = ()
    # grouped CTA orders (tile-rows per group) the walk adds beside the row-major one, on
    # the geometries whose tile_m and tile_n are both at least cta_group_min_tile
    # (geometries.yaml's cta_orders; none by default)
    cta_groups: tuple[int, ...] = ()
    cta_group_min_tile: int = 0
    # async-loop stage counts past 2 the walk adds beside the ping-pong, on the geometries
    # whose tile_m and tile_n are both at least stages_min_tile (geometries.yaml's
    # stages; none by default)
    stages: tuple[int, ...] = ()
    stages_min_tile: int = 0


DEFAULT_LIMITS = Limits()  # the shipped file's base filters (tested); no per-target override


@dataclass(frozen=True)
class Tile:
    """A geometry on a target at an A/B dtype: what the rules of a tile read (atom fit,
    block size, accumulators, LDS stages and bytes, loads per thread) before a loop or
    widths are chosen. The walk holds one per ladder geometry, ahead of any spec;
    ``KernelSpec.tile`` is a spec's."""

    target: Target
    dtype: str
    geometry: Geometry


@dataclass(frozen=True)
class LoadWidths:
    """A K loop and the widths of its global loads: (vec_a, vec_b) in elements on the sync
    loop, (chunk_a, chunk_b) in bytes on the async one. The walk crosses each slot with
    these before a spec exists; ``KernelSpec.load_widths`` is a spec's."""

    k_loop: str
    a: int
    b: int

    def elements(self, dtype: str) -> tuple[int, int]:
        """Elements per load of A and of B (an async chunk's bytes over the element's)."""
        per = 1 if self.k_loop == "sync" else elem_bytes(dtype)
        return self.a // per, self.b // per

    def spec_fields(self) -> dict[str, int]:
        """The KernelSpec fields these widths fill (``KernelSpec.load_widths``' inverse)."""
        if self.k_loop == "sync":
            return {"vec_a": self.a, "vec_b": self.b}
        return {"chunk_a": self.a, "chunk_b": self.b}


@dataclass(frozen=True, order=True)
class KernelSpec:
    """One kernel (DESIGN §4). vec_a/vec_b are 0 on the async loop (left to the copy),
    whose chunk widths in bytes are chunk_a/chunk_b (0 on the sync loop).

    ``cta_group`` is the CTA order: 1, row-major (block x walks the N tiles of one M
    tile-row, the order of every kernel before the field); G > 1, grouped (consecutive
    blocks walk G tile-rows before moving along N, Triton's GROUP_M: the CTAs that run
    together share A and B panels in L2; ``context.tile_origin``).

    ``k_loop`` "depthwise" is the direct depthwise kernel (``wgrad/depthwise.py``), whose
    fields mean: tile_m = T, the filter side it holds accumulators for (it serves every
    Y, X <= T); tile_n = channels per CTA; tile_k = reduction positions (n, ho, wo) per
    CTA step, one thread row each; vec_a = vec_b = channels per thread (its loads of dY
    and X); warp_m = waves (block = tile_n / vec_b x tile_k threads), warp_n = 1.

    ``k_loop`` "small_c" is the direct small-C kernel (``wgrad/small_c.py``): the depthwise
    fields, with tile_n = output channels k per CTA, vec_a = k per thread (its dY vector)
    and vec_b = Cc, the input channels it holds accumulators for (it serves every C <=
    Cc): B's width along C, as in every kernel, here all of a pixel's channels, read as
    Cc scalars (a pixel of C = 3 is 6 bytes, no vector's alignment). Reusing vec_b keeps
    the label grammar and every existing identity key; block = tile_n / vec_a x tile_k.

    ``stages`` is the async loop's LDS ring: S stages, S - 1 K tiles of copies in flight
    (``kloop.async_k_loop``); 2 is the ping-pong, and the only value of the sync loop
    (whose own 1 or 2 follows from the LDS, ``sync_stages``).

    ``wo_run`` (depthwise only) is the run of consecutive output columns a thread row takes
    per CTA step: R positions of one output row, whose X T x (T + R - 1) pixels are loaded
    once for R x T x T products (stride 1, dilation 1, Wo a multiple of R: ``serves``); a
    step covers tile_k x R positions (``k_step``). 1: one position, every kernel before."""

    target: str
    dtype: str  # A and B
    dw_dtype: str
    tile_m: int
    tile_n: int
    tile_k: int
    warp_m: int
    warp_n: int
    vec_a: int = 0
    vec_b: int = 0
    chunk_a: int = 0
    chunk_b: int = 0
    k_loop: str = "sync"
    epilogue: str = "default"
    reduction: str = "none"
    ws_replicas: int = 0
    cta_group: int = 1
    stages: int = 2
    wo_run: int = 1

    @property
    def geometry(self) -> Geometry:
        return (self.tile_m, self.tile_n, self.tile_k, self.warp_m, self.warp_n)

    @property
    def k_step(self) -> int:
        """Reduction positions one CTA step (a K tile) covers: tile_k, times ``wo_run``."""
        return self.tile_k * self.wo_run

    @property
    def tile(self) -> Tile:
        return Tile(get_target(self.target), self.dtype, self.geometry)

    @property
    def load_widths(self) -> LoadWidths:
        """The widths its loop takes: vec pair (sync) or chunk pair (async)."""
        if self.k_loop == "async":
            return LoadWidths(self.k_loop, self.chunk_a, self.chunk_b)
        return LoadWidths(self.k_loop, self.vec_a, self.vec_b)

    @property
    def variant(self) -> str:
        return f"{self.k_loop}.{self.epilogue}.{self.reduction}"

    @property
    def dtype_key(self) -> str:
        return dtype_key(self.dtype, self.dw_dtype)

    @property
    def block_size(self) -> int:
        return self.warp_m * self.warp_n * get_target(self.target).wave_size

    @property
    def load_vec_a(self) -> int:
        """Elements per global load of A (the copy's chunk on the async loop)."""
        return self.vec_a or self.chunk_a // elem_bytes(self.dtype)

    @property
    def load_vec_b(self) -> int:
        return self.vec_b or self.chunk_b // elem_bytes(self.dtype)

    @property
    def store_vec(self) -> int:
        """dW store vector along cpg (cshuffle epilogue); follows the B run."""
        return self.load_vec_b

    def canonical(self) -> dict:
        # fields are flat ints and strings: no deep copy (asdict) needed; a field of
        # IDENTITY_DEFAULTS at its default is left out (the keys of older kernels hold)
        return {"schema": SPEC_SCHEMA,
                **{f.name: getattr(self, f.name) for f in fields(self)
                   if IDENTITY_DEFAULTS.get(f.name, None) != getattr(self, f.name)}}

    def canonical_json(self) -> str:
        return _canonical_json(self.canonical())

    def identity_key(self) -> str:
        return identity_key_of(self.canonical())

    def label(self) -> str:
        dw = "" if self.dw_dtype == self.dtype else f"-dw{self.dw_dtype}"
        vec = (f"v{self.vec_a}x{self.vec_b}" if self.k_loop != "async"
               else f"c{self.chunk_a}x{self.chunk_b}")
        if self.k_loop == "sync" and (self.chunk_a or self.chunk_b):
            vec += f"c{self.chunk_a}x{self.chunk_b}"
        wsr = f"-wsr{self.ws_replicas}" if self.ws_replicas else ""
        order = f"-g{self.cta_group}" if self.cta_group != 1 else ""
        ring = f"-s{self.stages}" if self.stages != 2 else ""
        run = f"-r{self.wo_run}" if self.wo_run != 1 else ""
        return (f"{self.target}-{self.dtype}{dw}-{geometry_tag(self.geometry)}"
                f"-{vec}-{self.k_loop}-{self.epilogue}-{self.reduction}{wsr}{order}{ring}"
                f"{run}")

    @staticmethod
    def from_dict(d: dict) -> KernelSpec:
        names = {f.name for f in fields(KernelSpec)}
        return KernelSpec(**{k: v for k, v in d.items() if k in names})


def _canonical_json(canonical: dict) -> str:
    return json.dumps(canonical, sort_keys=True, separators=(",", ":"))


def identity_key_of(canonical: dict) -> str:
    """The identity key of a canonical spec (``KernelSpec.canonical``): the one hashing
    rule, used by ``identity_key`` and by the cache's entry reader, which checks that a
    stored identity hashes to the file it was read from without building a spec."""
    return hashlib.sha256(_canonical_json(canonical).encode()).hexdigest()


_LABEL = re.compile(
    r"^(?P<target>[a-z][a-z0-9_]*)-(?P<dtype>[a-z0-9]+)(?:-dw(?P<dw>[a-z0-9]+))?"
    r"-t(?P<tm>\d+)x(?P<tn>\d+)x(?P<tk>\d+)-w(?P<wm>\d+)x(?P<wn>\d+)"
    r"-(?:v(?P<va>\d+)x(?P<vb>\d+))?(?:c(?P<ca>\d+)x(?P<cb>\d+))?"
    r"-(?P<k_loop>[a-z_]+)-(?P<epilogue>[a-z]+)-(?P<reduction>[a-z_]+?)(?:-wsr(?P<wsr>\d+))?"
    r"(?:-g(?P<grp>\d+))?(?:-s(?P<stg>\d+))?(?:-r(?P<run>\d+))?$"
)


def geometry_tag(geometry: Geometry) -> str:
    """The tile/warp part of a label (``t64x64x32-w2x2``): how a geometry is named to
    people, by ``label`` and by every report that groups kernels by geometry."""
    tm, tn, tk, wm, wn = geometry
    return f"t{tm}x{tn}x{tk}-w{wm}x{wn}"


def from_label(label: str) -> KernelSpec:
    """Inverse of ``KernelSpec.label`` (lossless). Raises ValueError naming the label."""
    m = _LABEL.match(label.strip())
    if not m:
        raise ValueError(f"not a kernel label: {label!r} "
                         "(expected e.g. gfx1250-fp16-t64x64x32-w2x2-v8x8-sync-default-none)")
    g = m.groupdict()

    def num(key: str) -> int:
        return int(g[key]) if g[key] is not None else 0

    grp = g["grp"]
    if grp is not None and (str(int(grp)) != grp or int(grp) < 2):
        raise ValueError(f"not a kernel label: {label!r} (the row-major CTA order has no "
                         "-g part; a grouped one is -g<tile-rows>, e.g. -g8)")
    stg = g["stg"]
    if stg is not None and (str(int(stg)) != stg or int(stg) < 3):
        raise ValueError(f"not a kernel label: {label!r} (two LDS stages have no -s part; "
                         "a deeper async ring is -s<stages>, e.g. -s3)")
    run = g["run"]
    if run is not None and (str(int(run)) != run or int(run) < 2):
        raise ValueError(f"not a kernel label: {label!r} (one column a step has no -r part; "
                         "a run of output columns is -r<columns>, e.g. -r2)")
    return KernelSpec(
        target=g["target"], dtype=g["dtype"], dw_dtype=g["dw"] or g["dtype"],
        tile_m=num("tm"), tile_n=num("tn"), tile_k=num("tk"), warp_m=num("wm"), warp_n=num("wn"),
        vec_a=num("va"), vec_b=num("vb"), chunk_a=num("ca"), chunk_b=num("cb"),
        k_loop=g["k_loop"], epilogue=g["epilogue"], reduction=g["reduction"],
        ws_replicas=num("wsr"), cta_group=int(grp) if grp is not None else 1,
        stages=int(stg) if stg is not None else 2, wo_run=int(run) if run is not None else 1,
    )


def parse_dtype_key(key: str) -> tuple[str, str]:
    """'fp16' -> ('fp16', 'fp16'); 'bf16_f32' -> ('bf16', 'fp32')."""
    if key not in DTYPE_KEYS:
        raise ValueError(f"unknown dtype {key!r}; valid: {', '.join(DTYPE_KEYS)}")
    ab, _, dw = key.partition("_")
    return ab, ("fp32" if dw == "f32" else ab)


def dtype_key(dtype: str, dw_dtype: str) -> str:
    return dtype if dw_dtype == dtype else f"{dtype}_f32"


def elem_bytes(dtype: str) -> int:
    return 4 if dtype == "fp32" else 2


def accumulators_per_lane(tile_m: int, tile_n: int, warp_m: int, warp_n: int, wave: int) -> int:
    return (tile_m // warp_m) * (tile_n // warp_n) // wave


def sync_row_pad(target: Target, dtype: str, tile_k: int) -> int:
    """Elements added to each K-contiguous LDS row of the sync loop: the fewest that make the
    row pitch an odd multiple of ``target.lds_row_span``. One 128-byte shared-memory phase
    reads ``span`` bytes from each of 128 / span rows at the same column; at an odd
    multiple those rows start on distinct span-sized bank groups (no conflict). AMD's
    16-byte span gives upstream's 8-element pad at tile_k 32 and 64; m16n8k16's 32-byte
    span (4 lanes x 64-bit reads per row) needs 16: at 8, rows g and g+1 of one phase share
    4 banks (a 2-way conflict; the H200 measured +6 % aggregate at 16, benchmarks/README.md).
    """
    span, eb = target.lds_row_span, elem_bytes(dtype)
    pad = 0
    while ((tile_k + pad) * eb) % span or ((tile_k + pad) * eb // span) % 2 == 0:
        pad += 1
    return pad


def sync_k_outer(target: Target, dtype: str, vec_a: int, vec_b: int) -> bool:
    """The sync loop's LDS tiles are K-outer (tile_k rows of tile_mn + LDS_ROW_PAD, stored as
    loaded, fragments read by the target's transposing read) rather than K-contiguous
    (transposed in registers on the way in): where the target has such a read of 16-bit
    elements and both load vectors have at least ``target.sync_k_outer_min_vec`` elements
    (sm_90: any; gfx1250: 8, since a K-outer store of a narrow vector is a narrow LDS store
    where the transpose packs 8 k values into one). The one rule the LDS size, the stage
    count and the generator read.
    """
    return _k_outer_possible(target, dtype) and min(vec_a, vec_b) >= target.sync_k_outer_min_vec


def _k_outer_possible(target: Target, dtype: str) -> bool:
    """The target's sync loop goes K-outer for some load widths of ``dtype``."""
    return (target.sync_k_outer_min_vec > 0 and bool(target.lds_read_tr)
            and elem_bytes(dtype) == 2)


def _stage_bytes(tile: Tile, k_outer: bool) -> int:
    """One LDS stage of both operand tiles: K-outer (tile_k rows of tile_mn + LDS_ROW_PAD)
    or K-contiguous (tile_mn rows of tile_k + sync_row_pad)."""
    tile_m, tile_n, tile_k = tile.geometry[:3]
    eb = elem_bytes(tile.dtype)
    if k_outer:
        return tile_k * (tile_m + tile_n + 2 * LDS_ROW_PAD) * eb
    return (tile_m + tile_n) * (tile_k + sync_row_pad(tile.target, tile.dtype, tile_k)) * eb


def sync_stages(tile: Tile, k_outer: bool = False) -> int:
    """LDS stages of the sync K loop: 2 (the pipelined loop writes tile t+1 while tile t is
    read, one barrier per K tile) where two fit the target's LDS, else 1 (the same loop
    with a second barrier per tile). One stage is tile_m + tile_n K-contiguous rows of
    tile_k + sync_row_pad elements (or, ``k_outer``: ``sync_k_outer``, tile_k K-outer
    rows); two fit every WMMA ladder geometry (at most 40 KiB on the 64 KiB targets, whose
    tile_k is 32) and gfx950's; gfx942's 256-wide tiles take one.
    """
    one = _stage_bytes(tile, k_outer)
    return 2 if 2 * one <= tile.target.lds_bytes else 1


def async_ring_stages(target: Target, stages: int) -> int:
    """LDS stages the async loop allocates for a ring of ``stages``: the ring, and where
    the copy does not zero-fill itself (``Target.async_zero_fill``) one scratch stage per
    tile in flight (``stages - 1``) for out-of-range chunks' copies and in-range chunks'
    zero stores (``copies.copy_or_zero_fill``): each tile's scratch slot holds nothing a
    copy of another tile in flight still lands in (``kloop.async_k_loop``)."""
    return stages if target.async_zero_fill else 2 * stages - 1


def lds_bytes_for(tile: Tile, k_loop: str, epilogue: str,
                  vecs: tuple[int, int] | None = None, stages: int = 2) -> int:
    """LDS the generator allocates (the generator calls this; the validator bounds it).

    The sync loop stores K-contiguous tiles: tile_m + tile_n rows of tile_k + sync_row_pad
    elements (the pad keeps each row 16-byte aligned and spreads a wave's fragment reads
    over the banks), ``sync_stages`` of them; K-outer ones where ``sync_k_outer`` (which
    reads the load widths ``vecs``; None, as the ladder's geometry filter asks: the larger
    of the layouts the target may use). The async loop's copies land as memory holds them:
    K-outer tiles, tile_k rows of tile_mn + LDS_ROW_PAD elements, ``stages`` of them and the
    scratch stages of ``async_ring_stages`` (two and one for the ping-pong).
    The cshuffle staging (f32 tile_m x tile_n) reuses the operand buffers after the K
    loop's last barrier, so the allocation is the larger of the two.
    """
    target, dtype = tile.target, tile.dtype
    if k_loop == "async":
        operands = async_ring_stages(target, stages) * _stage_bytes(tile, True)
    else:
        if vecs is not None:
            layouts: tuple[bool, ...] = (sync_k_outer(target, dtype, *vecs),)
        else:
            layouts = (False, True) if _k_outer_possible(target, dtype) else (False,)
        operands = max(sync_stages(tile, ko) * _stage_bytes(tile, ko) for ko in layouts)
    tile_m, tile_n = tile.geometry[:2]
    staging = tile_m * tile_n * 4 if epilogue == "cshuffle" else 0
    return max(operands, staging)


def lds_bytes(spec: KernelSpec) -> int:
    if is_direct(spec):
        return direct_lds_bytes(spec)
    return lds_bytes_for(spec.tile, spec.k_loop, spec.epilogue, (spec.vec_a, spec.vec_b),
                         spec.stages)


def dynamic_lds_bytes(spec: KernelSpec) -> int:
    """The dynamic shared memory a launch of ``spec`` passes (0: its LDS is static), by
    ``Target.lds_dynamic``, the rule its lowering followed."""
    need = lds_bytes(spec)
    return need if get_target(spec.target).lds_dynamic(need) else 0


def spec_sync_k_outer(spec: KernelSpec) -> bool:
    """``sync_k_outer`` of a spec's sync loop (False for the async loop's)."""
    return spec.k_loop == "sync" and sync_k_outer(get_target(spec.target), spec.dtype,
                                                  spec.vec_a, spec.vec_b)


# ---- the predicates: each returns (ok, reason) ---------------------------------------

def geometry_fits(tile: Tile, limits: Limits | None) -> tuple[bool, str]:
    """Ladder filter, in fixed order: atom, divisibility, k-steps, block size, accumulators,
    LDS. ``limits``: the job data's budgets for the target; None checks the target alone."""
    target, dtype, geometry = tile.target, tile.dtype, tile.geometry
    tm, tn, tk, wm, wn = geometry
    atom = target.atom(dtype)
    if atom is None:
        return False, f"{target.name} has no MMA atom for {dtype}"
    if min(geometry) <= 0:
        return False, f"geometry {geometry} has a non-positive extent"
    if tm % wm or (tm // wm) % atom.m:
        return False, f"tile_m {tm} / warp_m {wm} is not a multiple of the atom's m {atom.m}"
    if tn % wn or (tn // wn) % atom.n:
        return False, f"tile_n {tn} / warp_n {wn} is not a multiple of the atom's n {atom.n}"
    if tk % atom.k:
        return False, f"tile_k {tk} is not a multiple of the atom's k {atom.k} ({atom.shape})"
    if limits is not None and tk // atom.k > limits.max_k_steps:
        return False, (f"tile_k {tk} is {tk // atom.k} k-steps of the {atom.shape} atom, over "
                       f"the budget {limits.max_k_steps}")
    block = wm * wn * target.wave_size
    lo = limits.min_block_size if limits is not None else target.wave_size
    hi = min(limits.max_block_size, target.max_block_size) if limits is not None \
        else target.max_block_size
    if not lo <= block <= hi:
        return False, f"block size {block} outside [{lo}, {hi}]"
    acc = accumulators_per_lane(tm, tn, wm, wn, target.wave_size)
    if limits is not None and acc > limits.max_acc_per_lane:
        return False, (f"{acc} accumulator registers per lane exceed the budget "
                       f"{limits.max_acc_per_lane}")
    return lds_fits(tile, "sync", "default")


def lds_fits(tile: Tile, k_loop: str, epilogue: str, stages: int = 2) -> tuple[bool, str]:
    target = tile.target
    need = lds_bytes_for(tile, k_loop, epilogue, stages=stages)
    if need > target.lds_bytes:
        ring = f", {stages} stages" if stages != 2 else ""
        return False, (f"LDS {need} B ({k_loop} loop{ring}, {epilogue} epilogue) exceeds "
                       f"{target.name}'s {target.lds_bytes} B")
    return True, ""


def load_widths_ok(widths: LoadWidths, dtype: str, tile_m: int, tile_n: int
                   ) -> tuple[bool, str]:
    """vec pair (sync, elements) or chunk pair (async, bytes) against the tile's sides."""
    a, b = widths.a, widths.b
    if widths.k_loop == "async":
        eb = elem_bytes(dtype)
        for name, c, tile in (("chunk_a", a, tile_m), ("chunk_b", b, tile_n)):
            if c not in ASYNC_CHUNK_BYTES:
                return False, f"{name} {c} B is not an async copy width {ASYNC_CHUNK_BYTES}"
            if tile % (c // eb):
                return False, f"{name} {c} B does not divide the tile row of {tile}"
        return True, ""
    for name, v, tile in (("vec_a", a, tile_m), ("vec_b", b, tile_n)):
        if v not in VEC_WIDTHS:
            return False, f"{name} {v} not one of {VEC_WIDTHS}"
        if tile % v:
            return False, f"{name} {v} does not divide the tile extent {tile}"
    return True, ""


def loads_per_thread(tile: Tile, widths: LoadWidths) -> float:
    """Global loads (vectors or async chunks) each thread issues per K tile."""
    tm, tn, tk, wm, wn = tile.geometry
    va, vb = widths.elements(tile.dtype)
    return (tm * tk // va + tn * tk // vb) / (wm * wn * tile.target.wave_size)


def async_copies_per_tile(spec: KernelSpec) -> int:
    """The async copies every thread issues in every K tile of ``spec``: each operand's
    chunks over the block, rounded down (a thread past a ragged tile's last chunk skips its
    last slot: ``slots.tile_slots``)."""
    eb, block = elem_bytes(spec.dtype), spec.block_size
    return sum(spec.tile_k * tile // (chunk // eb) // block
               for tile, chunk in ((spec.tile_m, spec.chunk_a), (spec.tile_n, spec.chunk_b)))


def ring_wait_depth(spec: KernelSpec, behind: int | None = None) -> int:
    """What the async loop's steady wait leaves in flight: the copies of the ``behind``
    newest tiles (``stages`` - 2: every tile issued after the one the phase reads). NVIDIA
    counts cp.async groups, one a tile: ``behind``. gfx1250's ``s_wait_asynccnt`` counts
    the wave's copy instructions, the oldest retiring first (Triton's AMD backend counts
    its own waits so): ``behind`` tiles of ``async_copies_per_tile``, at most
    ``ASYNC_COUNT_MAX``. The one rule of the generator and of verify's structure check."""
    behind = spec.stages - 2 if behind is None else behind
    if get_target(spec.target).async_zero_fill:
        return behind
    return min(behind * async_copies_per_tile(spec), ASYNC_COUNT_MAX)


def loads_fit(tile: Tile, widths: LoadWidths, limits: Limits | None) -> tuple[bool, str]:
    """Narrow loads hold every loaded element (and its address) in registers until the LDS
    store: too many per thread spill. ``limits`` None: no budget (spilling is not wrong)."""
    if limits is None:
        return True, ""
    a, b = widths.a, widths.b
    excluded, pair, key = ((limits.exclude, "vec pair", "exclude") if widths.k_loop == "sync"
                           else (limits.exclude_async, "async chunk pair", "exclude_async"))
    if (*tile.geometry, a, b) in excluded:
        return False, (f"{tile.target.name} keeps a stack frame for this geometry with "
                       f"{pair} ({a}, {b}) (measured; geometries.yaml filters {key} it)")
    n = loads_per_thread(tile, widths)
    if n > limits.max_loads_per_thread:
        return False, (f"{n:g} global loads per thread per K tile exceed the budget "
                       f"{limits.max_loads_per_thread}")
    return True, ""


def k_loop_admitted(target: Target, k_loop: str) -> tuple[bool, str]:
    if k_loop == "async" and not target.async_lds_copy:
        return False, (f"{target.name} has no async global->LDS copy (gfx1250's "
                       "global_load_async_to_lds, NVIDIA's cp.async)")
    return True, ""


def reduction_admitted(target: Target, dw_dtype: str, reduction: str,
                       epilogue: str = "default") -> tuple[bool, str]:
    if reduction == "atomic" and dw_dtype != "fp32" and not target.packed_atomics_native:
        return False, (f"{target.name} lowers <2 x {dw_dtype}> atomics to a compare-and-swap "
                       "loop: no 16-bit atomic split-K")
    if reduction == "two_stage":
        if not target.float_atomics_validated:
            return False, f"{target.name}: float atomics not validated for two-stage split-K"
        if epilogue != "default":
            return False, "two-stage split-K writes its f32 workspace from the default epilogue"
    return True, ""


def store_vector_ok(epilogue: str, reduction: str, store_vec: int) -> tuple[bool, str]:
    if epilogue == "cshuffle" and reduction == "atomic" and store_vec % 2:
        return False, f"cshuffle split-K pairs dW elements: store vector {store_vec} is odd"
    return True, ""


def cta_order_fits(cta_group: int, geometry: Geometry, limits: Limits | None
                   ) -> tuple[bool, str]:
    """The CTA order of a geometry. Every group in CTA_GROUP_RANGE makes a correct kernel
    (``limits`` None: the generator, ``serves``); the walk's data adds only the grouped
    orders it names, on tiles at least its ``cta_group_min_tile`` on both sides, where
    a panel is worth sharing and the walk stays bounded."""
    lo, hi = CTA_GROUP_RANGE
    if not lo <= cta_group <= hi:
        return False, f"cta_group {cta_group} outside [{lo}, {hi}]"
    if cta_group == 1 or limits is None:
        return True, ""
    if cta_group not in limits.cta_groups:
        named = ", ".join(map(str, limits.cta_groups)) or "none"
        return False, (f"grouped CTA order {cta_group} is not one the job data gives this "
                       f"target (cta_orders: {named})")
    tm, tn = geometry[:2]
    if min(tm, tn) < limits.cta_group_min_tile:
        return False, (f"grouped CTA order on a {tm}x{tn} tile: the job data groups tiles of "
                       f"at least {limits.cta_group_min_tile} on both sides")
    return True, ""


def cta_groups_for(geometry: Geometry, limits: Limits) -> tuple[int, ...]:
    """The CTA orders the walk gives ``geometry``: row-major, then every grouped order of
    the job data that ``cta_order_fits`` admits (the one rule of walk, count and validate)."""
    return (1, *(g for g in limits.cta_groups if cta_order_fits(g, geometry, limits)[0]))


def stages_fit(tile: Tile, k_loop: str, epilogue: str, stages: int,
               limits: Limits | None) -> tuple[bool, str]:
    """The LDS ring of the async loop. Every count in STAGE_RANGE whose LDS the target holds
    (``lds_fits``; on sm_90 past 48 KB as dynamic shared memory, ``Target.lds_dynamic``)
    makes a correct kernel (``limits`` None); the walk's data adds only the counts it
    names, on tiles at least its ``stages_min_tile`` on both sides. The sync loop has the
    one value 2 (its 1 or 2 stages follow from the LDS: ``sync_stages``)."""
    lo, hi = STAGE_RANGE
    if not lo <= stages <= hi:
        return False, f"stages {stages} outside [{lo}, {hi}]"
    if stages == 2:
        return True, ""
    if k_loop != "async":
        return False, f"a ring of {stages} LDS stages belongs to the async loop"
    ok, why = lds_fits(tile, k_loop, epilogue, stages)
    if not ok or limits is None:
        return ok, why
    if stages not in limits.stages:
        named = ", ".join(map(str, limits.stages)) or "none"
        return False, (f"{stages} async stages is not a count the job data gives this target "
                       f"(stages: {named})")
    tm, tn = tile.geometry[:2]
    if min(tm, tn) < limits.stages_min_tile:
        return False, (f"{stages} async stages on a {tm}x{tn} tile: the job data deepens "
                       f"tiles of at least {limits.stages_min_tile} on both sides")
    return True, ""


def stages_for(tile: Tile, k_loop: str, epilogue: str, limits: Limits) -> tuple[int, ...]:
    """The stage counts the walk gives a configuration: 2, then every count of the job data
    that ``stages_fit`` admits (the one rule of walk, count and validate)."""
    return (2, *(s for s in limits.stages
                 if stages_fit(tile, k_loop, epilogue, s, limits)[0]))


def _names_ok(spec: KernelSpec, target: Target, limits: Limits | None) -> tuple[bool, str]:
    if not target.has_kernels:
        return False, f"{target.name}: no kernel generator for {target.family} targets yet"
    if spec.dtype not in AB_DTYPES:
        return False, f"dtype {spec.dtype!r} not one of {AB_DTYPES}"
    if spec.dw_dtype not in (spec.dtype, "fp32"):
        return False, f"dW dtype {spec.dw_dtype!r} must be {spec.dtype} or fp32"
    for name, value, allowed in (("k_loop", spec.k_loop, (*K_LOOPS, DEPTHWISE, SMALL_C)),
                                 ("epilogue", spec.epilogue, EPILOGUES),
                                 ("reduction", spec.reduction, REDUCTIONS)):
        if value not in allowed:
            return False, f"{name} {value!r} not one of {allowed}"
    if spec.wo_run not in WO_RUNS:
        return False, f"wo_run {spec.wo_run} not one of {WO_RUNS}"
    if spec.wo_run != 1 and spec.k_loop != DEPTHWISE:
        return False, (f"a run of output columns (wo_run {spec.wo_run}) is the depthwise "
                       "kernel's alone")
    return True, ""


def _widths_belong(spec: KernelSpec, target: Target, limits: Limits | None) -> tuple[bool, str]:
    if spec.k_loop == "async" and (spec.vec_a or spec.vec_b):
        return False, ("the async loop takes its widths from the copy: vec_a/vec_b "
                       "must be left unset")
    if spec.k_loop == "sync" and (spec.chunk_a or spec.chunk_b):
        return False, "chunk_a/chunk_b belong to the async loop"
    return load_widths_ok(spec.load_widths, spec.dtype, spec.tile_m, spec.tile_n)


def _replicas_ok(spec: KernelSpec, target: Target, limits: Limits | None) -> tuple[bool, str]:
    if spec.reduction == "two_stage" and spec.ws_replicas < 1:
        return False, f"ws_replicas {spec.ws_replicas} must be >= 1 for two-stage"
    if spec.reduction != "two_stage" and spec.ws_replicas:
        return False, "ws_replicas belongs to two-stage split-K"
    return True, ""


# validate's rules, in their fixed order (the first failure is the reason a reject records).
_RULES = (
    _names_ok,
    lambda s, t, lim: geometry_fits(Tile(t, s.dtype, s.geometry), lim),
    lambda s, t, lim: k_loop_admitted(t, s.k_loop),
    _widths_belong,
    lambda s, t, lim: loads_fit(Tile(t, s.dtype, s.geometry), s.load_widths, lim),
    lambda s, t, lim: reduction_admitted(t, s.dw_dtype, s.reduction, s.epilogue),
    lambda s, t, lim: store_vector_ok(s.epilogue, s.reduction, s.store_vec),
    _replicas_ok,
    lambda s, t, lim: cta_order_fits(s.cta_group, s.geometry, lim),
    lambda s, t, lim: stages_fit(Tile(t, s.dtype, s.geometry), s.k_loop, s.epilogue,
                                 s.stages, lim),
    lambda s, t, lim: lds_fits(Tile(t, s.dtype, s.geometry), s.k_loop, s.epilogue, s.stages),
)


# ---- the direct kernels: depthwise and small-C ------------------------------------------

def is_depthwise(spec: KernelSpec) -> bool:
    return spec.k_loop == DEPTHWISE


def is_small_c(spec: KernelSpec) -> bool:
    return spec.k_loop == SMALL_C


def is_direct(spec: KernelSpec) -> bool:
    """A direct kernel (``wgrad/direct.py``): per-thread f32 accumulators over a slice of
    N·Ho·Wo, an LDS row reduction, grid (channel blocks, 1, degree); no MMA tile."""
    return spec.k_loop in (DEPTHWISE, SMALL_C)


def depthwise_accumulators(taps: int, vec: int) -> int:
    """f32 accumulators per thread of a depthwise kernel: one per tap and channel."""
    return taps * taps * vec


def depthwise_lds_bytes(taps: int, tile_n: int, tile_k: int) -> int:
    """The CTA reduction's LDS: every thread row's f32 partial of every tap and channel
    ([taps², tile_k, tile_n]), summed over the rows after one barrier."""
    return taps * taps * tile_k * tile_n * 4


@dataclass(frozen=True)
class DirectKind:
    """What tells the two direct kernels apart, for every rule and reader of them: the
    name messages call it by, its dY vector's field and width, and the accumulator
    vectors (and X reads) per compiled tap."""

    name: str
    vec_field: str
    vec: int
    per_tap: int


def direct_kind(spec: KernelSpec) -> DirectKind:
    """A depthwise kernel's vector is vec_b (= vec_a), one per tap; a small-C kernel's is
    vec_a, with Cc = vec_b per tap (its channels, each a scalar read of X)."""
    if is_small_c(spec):
        return DirectKind("small-C", "vec_a", spec.vec_a, spec.vec_b)
    return DirectKind("depthwise", "vec_b", spec.vec_b, 1)


def direct_accumulators(spec: KernelSpec) -> int:
    """f32 accumulators per thread of a direct kernel: taps x its vectors per tap x the
    channels of one vector."""
    kind = direct_kind(spec)
    return depthwise_accumulators(spec.tile_m, kind.vec) * kind.per_tap


def direct_lds_bytes(spec: KernelSpec) -> int:
    """A direct kernel's LDS: the row reduction's [taps² x vectors per tap, tile_k,
    tile_n] f32 partials."""
    return depthwise_lds_bytes(spec.tile_m, spec.tile_n, spec.tile_k) * direct_kind(spec).per_tap


def _direct_vectors(spec: KernelSpec) -> tuple[bool, str]:
    """The load widths a direct kernel takes: depthwise, one channel width for dY and X;
    small-C, a dY vector of VEC_WIDTHS and Cc in SMALL_C_CHANNELS."""
    if is_depthwise(spec):
        if spec.vec_a != spec.vec_b or spec.vec_b not in VEC_WIDTHS:
            return False, (f"depthwise vec pair ({spec.vec_a}, {spec.vec_b}): one channel "
                           f"width of {VEC_WIDTHS} for dY and X")
        return True, ""
    if spec.vec_a not in VEC_WIDTHS:
        return False, f"small-C dY vector vec_a {spec.vec_a} not one of {VEC_WIDTHS}"
    lo, hi = SMALL_C_CHANNELS
    if not lo <= spec.vec_b <= hi:
        return False, f"small-C channel count vec_b {spec.vec_b} outside [{lo}, {hi}]"
    return True, ""


def _depthwise_shape(spec: KernelSpec, target: Target, limits: Limits | None
                     ) -> tuple[bool, str]:
    """The fields a direct kernel has and how its block follows from them (depthwise and
    small-C alike, each in its own words: ``direct_kind``)."""
    dk = direct_kind(spec)
    kind, vec_name, vec = dk.name, dk.vec_field, dk.vec
    lo_t, hi_t = DEPTHWISE_TAPS
    if not lo_t <= spec.tile_m <= hi_t:
        return False, f"{kind} filter side {spec.tile_m} outside [{lo_t}, {hi_t}]"
    if spec.epilogue != "default" or spec.cta_group != 1 or spec.chunk_a or spec.chunk_b:
        return False, (f"the {kind} kernel has the default epilogue, the row-major CTA "
                       "order and no async chunks")
    if spec.stages != 2:
        return False, f"the {kind} kernel has no async ring: stages {spec.stages} is not 2"
    ok, why = _direct_vectors(spec)
    if not ok:
        return ok, why
    if min(spec.tile_n, spec.tile_k) < 1 or spec.tile_n % vec:
        return False, f"{vec_name} {vec} does not divide the channel block {spec.tile_n}"
    block = spec.tile_n // vec * spec.tile_k
    if spec.warp_n != 1 or spec.warp_m * target.wave_size != block:
        return False, (f"a {kind} block is tile_n / {vec_name} x tile_k = {block} threads: "
                       f"warp_m x warp_n must be {block / target.wave_size:g} x 1")
    hi = min(limits.max_block_size, target.max_block_size) if limits is not None \
        else target.max_block_size
    if block > hi:
        return False, f"block size {block} over {hi}"
    acc = direct_accumulators(spec)
    if limits is not None and acc > limits.max_acc_per_lane:
        return False, (f"{acc} accumulator registers per lane exceed the budget "
                       f"{limits.max_acc_per_lane}")
    return True, ""


def _depthwise_reduction(spec: KernelSpec, target: Target, limits: Limits | None
                         ) -> tuple[bool, str]:
    kind = direct_kind(spec).name
    if spec.reduction == "two_stage" or spec.ws_replicas:
        # depthwise only: a 16-bit dW's packed atomics lose what a high degree sums
        # (bf16's caps dw112 at 24 CTAs), where f32 adds into the workspace do not
        if kind != DEPTHWISE:
            return False, f"the {kind} kernel reduces by atomics (no two-stage workspace)"
        if spec.dw_dtype == "fp32":
            return False, (f"an f32 dW takes the {kind} kernel's f32 atomics in place: a "
                           "two-stage workspace adds nothing")
        ok, why = _replicas_ok(spec, target, limits)
        if not ok:
            return ok, why
    ok, why = reduction_admitted(target, spec.dw_dtype, spec.reduction)
    if ok and spec.reduction == "atomic" and spec.dw_dtype != "fp32" and spec.tile_n % 2:
        return False, (f"packed {spec.dw_dtype} atomics write dword pairs of dW: the channel "
                       f"block {spec.tile_n} is odd")
    return ok, why


def _depthwise_lds(spec: KernelSpec, target: Target, limits: Limits | None
                   ) -> tuple[bool, str]:
    need = lds_bytes(spec)
    if need > target.lds_bytes:
        return False, (f"LDS {need} B ({direct_kind(spec).name} reduction) exceeds "
                       f"{target.name}'s {target.lds_bytes} B")
    return True, ""


# the direct kernels' rules (depthwise and small-C), in their fixed order
_DEPTHWISE_RULES = (_names_ok, _depthwise_shape, _depthwise_reduction, _depthwise_lds)


def validate(spec: KernelSpec, *, limits: Limits | None,
             target: Target | None = None) -> tuple[bool, str]:
    """Every rule a spec must obey on its target, in a fixed order; first failure wins.

    ``limits`` (required, no default): the ladder budgets of the job data the caller walks,
    ``JobData.limits_for(spec.target)``, so a custom geometries file admits in the build
    what it admits in ``count``; ``None`` checks every rule but the budgets (the generator
    and ``serves``: what a correct kernel needs).
    """
    try:
        target = target or get_target(spec.target)
    except KeyError as e:
        return False, str(e.args[0])
    for rule in _DEPTHWISE_RULES if is_direct(spec) else _RULES:
        ok, why = rule(spec, target, limits)
        if not ok:
            return ok, why
    return True, ""
