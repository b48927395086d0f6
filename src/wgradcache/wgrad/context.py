"""What every part of one wgrad kernel shares: the builder, the spec, the arguments, the
launch coordinates (tile, group, K slice) and the LDS layout.

Grid (DESIGN §4): x = N tile, y = M tile, z = group · ks_count + slice. Each CTA reduces
[slice·ks, min(slice·ks + ks, wg_K)); an empty slice (an explicit degree above the number
of K tiles) runs no iteration and adds zeros. The CTA order (``spec.cta_group``) maps
(x, y) to the tile a CTA computes (``tile_origin``); z, and with it the split slice, is
the same in every order.

LDS (``spec.lds_bytes``, one allocation), in one of two layouts:

* sync loop, K-contiguous: per stage, A as tile_m rows of tile_k + 8 elements, then B as
  tile_n rows of tile_k + 8; two stages (the pipelined loop, ``kloop.sync_k_loop``). Each
  row holds its k values in ``mma.lds_k_order`` per atom k-step, so a lane's fragment is
  one contiguous run, read at 128 bits (``kloop`` says why this layout); the loaders
  transpose in registers on the way in.
* async loop, K-outer: per stage, A as tile_k rows of tile_m + 8 elements, then B as tile_k
  rows of tile_n + 8 (the copies land as memory holds them); ``spec.stages`` of them (two,
  or the deeper ring of ``kloop._ring_k_loop``), then gfx1250's scratch stages
  (``spec.async_ring_stages``). The sync loop
  takes this layout too where the target reads it with a transposing read
  (``spec.sync_k_outer``: sm_90's ldmatrix .trans; gfx1250's ds_load_tr16_b128 with
  8-element loads), its stores then plain row vectors.

The cshuffle staging (f32 tile_m × tile_n) reuses the same bytes after the K loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgradcache.kernel import mma
from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import DType, Value, bf16, f16, f32, i32, i64
from wgradcache.model.spec import (
    LDS_ROW_PAD,
    KernelSpec,
    elem_bytes,
    lds_bytes,
    spec_sync_k_outer,
    sync_row_pad,
)
from wgradcache.model.targets import get_target
from wgradcache.wgrad.abi import WGRAD_ARGS, declare

__all__ = ["WgradContext", "ir_dtype", "udiv_const", "urem_const", "udiv_magic",
           "divmod_magic", "all_of", "tile_origin"]

_IR = {"fp16": f16, "bf16": bf16, "fp32": f32}


def ir_dtype(name: str) -> DType:
    return _IR[name]


def udiv_const(kb: KernelBuilder, x: Value, c: int) -> Value:
    """x // c for a non-negative x and a constant c (a shift when c is a power of two)."""
    if c == 1:
        return x
    if c & (c - 1) == 0:
        return kb.lshr(x, c.bit_length() - 1)
    return kb.udiv(x, c)


def urem_const(kb: KernelBuilder, x: Value, c: int) -> Value:
    if c == 1:
        return kb.const(0, x.dtype)
    if c & (c - 1) == 0:
        return kb.and_(x, c - 1)
    return kb.urem(x, c)


def udiv_magic(kb: KernelBuilder, x: Value, args: dict[str, Value], name: str) -> Value:
    """x // args[name] for 0 <= x < 2^31 through the host's magic pair (abi.magic_u31)."""
    wide = kb.mul(kb.zext(x, i64), kb.zext(args[f"mag_{name}"], i64))
    return kb.trunc(kb.lshr(wide, kb.zext(args[f"shr_{name}"], i64)), i32)


def divmod_magic(kb: KernelBuilder, x: Value, args: dict[str, Value], name: str
                 ) -> tuple[Value, Value]:
    q = udiv_magic(kb, x, args, name)
    return q, kb.sub(x, kb.mul(q, args[name]))


def all_of(kb: KernelBuilder, *preds: Value | None) -> Value | None:
    """AND of the given i1 predicates (None entries are 'always true'); None if all are."""
    out = None
    for p in preds:
        if p is None:
            continue
        out = p if out is None else kb.and_(out, p)
    return out


@dataclass
class WgradContext:
    """Values defined once at the top of a wgrad kernel (see the module docstring)."""

    kb: KernelBuilder
    spec: KernelSpec
    a: dict[str, Value]  # kernel arguments by ABI name
    lay: mma.MmaLayout
    tid: Value
    lane: Value
    lane_mn: Value  # the lane's A row / B column in an atom (lay.lane_mn: lane % 16 on AMD)
    lane_grp: Value  # its k group (lay.lane_group: lane // 16 on AMD)
    wave_m: Value
    wave_n: Value
    m0: Value  # first GEMM row (within the group) of this CTA's tile
    n0: Value
    z: Value
    group: Value
    slice: Value
    k_begin: Value
    k_end: Value
    smem: Value  # the one LDS allocation (i8)

    @property
    def eb(self) -> int:
        return elem_bytes(self.spec.dtype)

    @property
    def ab(self) -> DType:
        return ir_dtype(self.spec.dtype)

    @property
    def k_contiguous(self) -> bool:
        """The LDS layout: K-contiguous rows (sync loop) or K-outer rows (async loop, and the
        sync loop where ``spec.sync_k_outer``)."""
        return self.spec.k_loop == "sync" and not spec_sync_k_outer(self.spec)

    @property
    def row_k(self) -> int:
        """Elements per K-contiguous LDS row (one m of A or one n of B)."""
        s = self.spec
        return s.tile_k + sync_row_pad(get_target(s.target), s.dtype, s.tile_k)

    @property
    def row_a(self) -> int:
        """Elements per K-outer LDS row of A (one k)."""
        return self.spec.tile_m + LDS_ROW_PAD

    @property
    def row_b(self) -> int:
        return self.spec.tile_n + LDS_ROW_PAD

    @property
    def stage_elems(self) -> int:
        if self.k_contiguous:
            return (self.spec.tile_m + self.spec.tile_n) * self.row_k
        return self.spec.tile_k * (self.row_a + self.row_b)

    @property
    def b_offset(self) -> int:
        """Element offset of the B tile inside a stage."""
        if self.k_contiguous:
            return self.spec.tile_m * self.row_k
        return self.spec.tile_k * self.row_a

    @property
    def sub_m(self) -> int:
        return self.spec.tile_m // self.spec.warp_m

    @property
    def sub_n(self) -> int:
        return self.spec.tile_n // self.spec.warp_n

    def lds_ab(self) -> Value:
        return self.kb.ptr_cast(self.smem, self.ab)


def _lane_field(kb: KernelBuilder, lane: Value, div: int, mod: int, wave: int) -> Value:
    """(lane // div) % mod of a lane index below ``wave`` (mod 0: no modulo): a shift, an
    and, or both; the modulo is dropped where div·mod covers the wave."""
    x = udiv_const(kb, lane, div)
    return urem_const(kb, x, mod) if mod and div * mod < wave else x


def tile_origin(kb: KernelBuilder, tile_m: int, tile_n: int, cta_group: int,  # noqa: PLR0913 - a kernel builder: the tile's constants beside its IR values
                wg_m: Value, wg_n: Value) -> tuple[Value, Value]:
    """(m0, n0), the first GEMM row and column of the tile this CTA computes.

    Row-major (``cta_group`` 1): the tile is (blockIdx.y, blockIdx.x); the blocks the
    hardware dispatches together (x fastest) share one A panel and read every B panel.
    Grouped G (Triton's GROUP_M swizzle): the block's dispatch index pid = y·tiles_n + x
    walks G tile-rows before moving along N, so a wave of CTAs shares G A panels and a
    few B panels. Since x < tiles_n, the group of pid is y // G (a constant division);
    the last group holds the tile-rows left, tiles_m − first (1..G), the one runtime
    division, once per CTA. The grid is the row-major one (``split_k.plan_split_k``), and
    tiles_m and tiles_n the same ceilings of wg_M / tile_m and wg_N / tile_n it took:
    every tile is computed once in either order.
    """
    if cta_group == 1:
        return kb.mul(kb.workgroup_id(1), tile_m), kb.mul(kb.workgroup_id(0), tile_n)
    y, x = kb.workgroup_id(1), kb.workgroup_id(0)
    tiles_m = udiv_const(kb, kb.add(wg_m, tile_m - 1), tile_m)
    tiles_n = udiv_const(kb, kb.add(wg_n, tile_n - 1), tile_n)
    first = kb.mul(udiv_const(kb, y, cta_group), cta_group)
    rows = kb.umin(kb.sub(tiles_m, first), cta_group)
    local = kb.add(kb.mul(urem_const(kb, y, cta_group), tiles_n), x)
    tile_n_idx = kb.udiv(local, rows)
    tile_m_idx = kb.add(first, kb.sub(local, kb.mul(tile_n_idx, rows)))
    return kb.mul(tile_m_idx, tile_m), kb.mul(tile_n_idx, tile_n)


def open_wgrad_kernel(spec: KernelSpec, name: str) -> WgradContext:
    """Builder, ABI arguments and launch coordinates of a wgrad kernel for ``spec``."""
    target = get_target(spec.target)
    atom = target.atom(spec.dtype)
    kb = KernelBuilder(name, spec.block_size)
    args = declare(kb, WGRAD_ARGS, spec.dtype, spec.dw_dtype)
    smem = kb.lds("smem", lds_bytes(spec))
    tid = kb.thread_id()
    wave = udiv_const(kb, tid, target.wave_size)
    lane = urem_const(kb, tid, target.wave_size)
    z = kb.workgroup_id(2)
    group = kb.udiv(z, args["ks_count"])
    slc = kb.urem(z, args["ks_count"])
    k_begin = kb.mul(slc, args["ks"])
    k_end = kb.smin(kb.add(k_begin, args["ks"]), args["wg_K"])
    lay = mma.layout(atom.form)
    lane_mn = _lane_field(kb, lane, *lay.mn_lanes, target.wave_size)
    lane_grp = _lane_field(kb, lane, *lay.grp_lanes, target.wave_size)
    wave_m, wave_n = urem_const(kb, wave, spec.warp_m), udiv_const(kb, wave, spec.warp_m)
    m0, n0 = tile_origin(kb, spec.tile_m, spec.tile_n, spec.cta_group,
                         args["wg_M"], args["wg_N"])
    return WgradContext(
        kb=kb, spec=spec, a=args, lay=lay, tid=tid, lane=lane,
        lane_mn=lane_mn, lane_grp=lane_grp, wave_m=wave_m, wave_n=wave_n, m0=m0, n0=n0,
        z=z, group=group, slice=slc, k_begin=k_begin, k_end=k_end, smem=smem)

