"""Per-lane register layouts of the matrix atoms (WMMA / MFMA), shared by every consumer.

One ``MmaLayout`` per operand form says which matrix element each lane holds in each
vector slot of the A, B and C/D operands of one instruction. The generator reads it to
load fragments from LDS, the emulator to gather lanes into matrices and scatter D back,
the lowering for operand vector lengths. Sources and confidence are in
``shared/reference/mma-lane-maps.md``; each layout below cites them.

Every layout has the same shape. Two fields of the lane index place a lane:
``mn = (lane // mn_div) % mn_mod`` (its A row / B column) and ``g = (lane // grp_div) %
grp_mod`` (its k group); AMD: ``mn = lane % 16``, ``g = lane // 16``; NVIDIA m16n8k16:
``mn = lane >> 2`` (groupID), ``g = lane & 3`` (threadID_in_group). Slot i of an A/B
fragment is row block ``i // len(k_offsets)`` and k slot ``i % len(k_offsets)``:

* A (M x K): lane holds, in slot i, row ``mn + row_offsets[i // nk]`` and
  ``k = g * k_group_stride + k_offsets[i % nk]`` (nk = len(k_offsets));
* B (K x N): the same with the row as B's column (one map for both: required);
* C/D (M x N): slot r is ``row = mn*c_row_mn + g*c_row_group_stride + c_row_offsets[r]``,
  ``col = mn*c_col_mn + g*c_col_group_stride + c_col_offsets[r]``.

Row (A), column (B) and the whole C/D map must match hardware; the in-lane k order is free
as long as A and B share it, since D = C + sum_k A[m,k] B[k,n] is invariant under one
permutation of k applied to both. So is the order of the slots inside the IR's fragment:
the lowering maps IR slots to the instruction's registers (``MmaIntrinsic.a_regs`` ...).

The LLVM intrinsic of each form and A/B element type lives here too (``INTRINSICS``, the
only place in the package that names one): its operand vectors are the lane layout's slots,
and the lowering and ``compile.samples`` both build their calls from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from wgradcache.model.targets import get_target

__all__ = ["MmaLayout", "LAYOUTS", "layout", "k_runs", "lds_k_order", "MmaIntrinsic",
           "INTRINSICS", "intrinsic", "TransposedRead", "TRANSPOSED_READS", "transposed_read",
           "transposed_read_provenance"]


@dataclass(frozen=True)
class MmaLayout:
    """Lane maps of one atom form (see module docstring for the formulas)."""

    form: str
    m: int
    n: int
    k: int
    wave_size: int
    k_group_stride: int  # 0: lane groups duplicate each other (gfx11)
    k_offsets: tuple[int, ...]  # per k slot of one row block
    c_row_group_stride: int
    c_row_offsets: tuple[int, ...]  # per C/D slot
    source: str
    mn_lanes: tuple[int, int] = (1, 16)  # (div, mod): lane -> mn
    grp_lanes: tuple[int, int] = (16, 0)  # (div, mod), mod 0: none: lane -> g
    row_offsets: tuple[int, ...] = (0,)  # A row (B column) offset per row block of slots
    c_row_mn: int = 0
    c_col_mn: int = 1
    c_col_group_stride: int = 0
    c_col_offsets: tuple[int, ...] = ()  # () : all 0

    @property
    def ab_elems(self) -> int:
        return len(self.row_offsets) * len(self.k_offsets)

    @property
    def run(self) -> int:
        """Consecutive slots of one row block: k values of one A row (B column) that a lane
        holds, read from a K-contiguous LDS row with one vector load."""
        return len(self.k_offsets)

    def lane_mn(self, lane):
        div, mod = self.mn_lanes
        return (lane // div) % mod

    def lane_group(self, lane):
        div, mod = self.grp_lanes
        return lane // div % mod if mod else lane // div

    def col_offset(self, r: int) -> int:
        return self.c_col_offsets[r] if self.c_col_offsets else 0

    @property
    def c_elems(self) -> int:
        return len(self.c_row_offsets)

    @property
    def ab_copies(self) -> int:
        """How many lanes hold each A/B element (2 on gfx11, 1 elsewhere)."""
        return self.wave_size * self.ab_elems // (self.m * self.k)

    def a_map(self, lane, i):
        """(row, k) of A held by ``lane`` in slot ``i`` (ints or numpy arrays)."""
        i = np.asarray(i)
        nk = self.run
        row = self.lane_mn(lane) + np.asarray(self.row_offsets)[i // nk]
        return row, self.lane_group(lane) * self.k_group_stride + \
            np.asarray(self.k_offsets)[i % nk]

    def b_map(self, lane, i):
        """(k, col) of B held by ``lane`` in slot ``i``."""
        row, k = self.a_map(lane, i)
        return k, row

    def c_map(self, lane, r):
        """(row, col) of C/D held by ``lane`` in slot ``r``."""
        mn, g = self.lane_mn(lane), self.lane_group(lane)
        rows = mn * self.c_row_mn + g * self.c_row_group_stride + \
            np.asarray(self.c_row_offsets)[r]
        cols = mn * self.c_col_mn + g * self.c_col_group_stride + \
            np.asarray(self.c_col_offsets or (0,) * self.c_elems)[r]
        return rows, cols

    def tables(self):
        """Index tables [wave_size, slots]: (a_row, a_k), (c_row, c_col)."""
        lane = np.arange(self.wave_size)[:, None]
        a_row, a_k = self.a_map(lane, np.arange(self.ab_elems)[None, :])
        c_row, c_col = self.c_map(lane, np.arange(self.c_elems)[None, :])
        a_row, a_k = np.broadcast_arrays(a_row, a_k)
        c_row, c_col = np.broadcast_arrays(c_row, c_col)
        return (a_row, a_k), (c_row, c_col)


def k_runs(lay: MmaLayout) -> list[tuple[int, int, int]]:
    """Runs of consecutive k in the A/B slots: (first slot, k offset, length).

    A generator loads each run with one vector LDS read when the LDS layout is k-contiguous.
    """
    runs: list[tuple[int, int, int]] = []
    for i, off in enumerate(lay.k_offsets):
        if runs and runs[-1][1] + runs[-1][2] == off and runs[-1][0] + runs[-1][2] == i:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((i, off, 1))
    return runs


def lds_k_order(lay: MmaLayout) -> tuple[int, ...]:
    """The k held at each position of a K-contiguous LDS row segment of ``lay.k`` elements,
    chosen so that every lane's k values of one row are one contiguous run: lane group g's
    k slots are positions [g·run, (g+1)·run) in slot order (gfx11's duplicated groups all
    read positions [0, run)).

    A writer that stores row (m or n) of the tile with element k at position
    ``lds_k_order(lay).index(k)`` lets each lane read its fragment with one vector load of
    ``run`` elements per row block: the lane map's k order lives in the LDS layout, not in
    the reads. A bijection on [0, lay.k) (tested); the identity where the lane map is
    already k-ordered (gfx11, MFMA), a swap of 4-element (gfx12) or 8-element (gfx1250) runs,
    and on m16n8k16 the pairs (2t, 2t+1, 2t+8, 2t+9) of thread t side by side.
    """
    groups = lay.k // lay.run if lay.k_group_stride else 1
    return tuple(g * lay.k_group_stride + off for g in range(groups) for off in lay.k_offsets)


LAYOUTS: dict[str, MmaLayout] = {
    # gfx1250 v_wmma_f32_16x16x32_{f16,bf16}. A/B k-map is UNRESOLVED across sources; we pick
    # K-ck: k = 16*(i//8) + 8*(l//16) + i%8 (CK ck_tile gfx12 traits with K=32; Triton wmma v3
    # kWidth=8), used for both A and B. Rows/cols: lane%16 (high confidence). C/D:
    # row = 8*(l//16) + r, col = l%16 (CK WmmaTraitsBase<gfx12_t>, IREE gfx12WmmaAcc16x16,
    # Triton wmma v2/v3). mma-lane-maps.md §1.
    "gfx1250": MmaLayout(
        "gfx1250", 16, 16, 32, 32, k_group_stride=8,
        k_offsets=tuple(16 * (i // 8) + i % 8 for i in range(16)),
        c_row_group_stride=8, c_row_offsets=tuple(range(8)),
        source="mma-lane-maps.md §1: K-ck k-map (CK, Triton kWidth=8); C/D CK/IREE/Triton"),
    # gfx12 (gfx1201) v_wmma_f32_16x16x16_{f16,bf16}: the ISA (hardware) k-map
    # k = 8*(i//4) + 4*(l//16) + i%4 (AMD matrix calculator InstCalcGfx12, iree-org/wave PR #306
    # quoting the ISA). C/D row = 8*(l//16) + r (calculator, CK, IREE, ROCm issue #6025,
    # hipfire PR #140 hardware probe). mma-lane-maps.md §2.
    "gfx12": MmaLayout(
        "gfx12", 16, 16, 16, 32, k_group_stride=4,
        k_offsets=tuple(8 * (i // 4) + i % 4 for i in range(8)),
        c_row_group_stride=8, c_row_offsets=tuple(range(8)),
        source="mma-lane-maps.md §2: ISA k-map (AMD calculator, wave PR #306); C/D 6 sources"),
    # gfx11 (gfx1100/gfx1151) v_wmma_f32_16x16x16_{f16,bf16}: k = i; lanes 16-31 duplicate
    # lanes 0-15 (calculator, IREE WMMAR3, Modular docs, FlyDSL PR #544). C/D row interleave:
    # row = 2*r + l//16 (calculator, IREE, Triton wmma v1, Modular). mma-lane-maps.md §3.
    "gfx11": MmaLayout(
        "gfx11", 16, 16, 16, 32, k_group_stride=0,
        k_offsets=tuple(range(16)),
        c_row_group_stride=1, c_row_offsets=tuple(2 * r for r in range(8)),
        source="mma-lane-maps.md §3: AMD calculator InstCalcGfx11, IREE WMMAR3, Modular"),
    # CDNA3/CDNA4 (gfx942, gfx950) v_mfma_f32_16x16x16_f16 / 16x16x16bf16_1k (wave64):
    # A row = l%16, k = 4*(l//16) + i; C/D row = 4*(l//16) + r, col = l%16.
    # Source 1: AMD matrix instruction calculator InstCalcGfx9 (mma-lane-maps.md §4a: lane =
    # (k//4)*16 + row, element = k%4; 4-row output groups). Source 2: CK,
    # ROCm/composable_kernel include/ck_tile/ops/gemm/warp/warp_gemm_attribute_mfma_impl.hpp
    # @015d9f72, WarpGemmAttributeMfmaImplF16F16F32M16N16K16: kAMLane 16, kABKLane 4,
    # kABKPerLane 4 (k = 4*(l//16) + i), kCMLane 4, kCNLane 16, kCM1PerLane 4
    # (row = 4*(l//16) + r). IREE mfmaLhs16xK / Triton agree (§4).
    "mfma": MmaLayout(
        "mfma", 16, 16, 16, 64, k_group_stride=4,
        k_offsets=tuple(range(4)),
        c_row_group_stride=4, c_row_offsets=tuple(range(4)),
        source="mma-lane-maps.md §4a: AMD calculator InstCalcGfx9; CK "
               "warp_gemm_attribute_mfma_impl.hpp M16N16K16"),
    # CDNA4 (gfx950 only) v_mfma_f32_16x16x32_{f16,bf16} (wave64): A row = l%16,
    # k = 8*(l//16) + i (8 contiguous k per lane); C/D as the 16x16x16 form.
    # Source 1: CK, ROCm/composable_kernel include/ck_tile/ops/gemm/warp/
    # warp_gemm_attribute_mfma_impl.hpp @015d9f72, WarpGemmAttributeMfmaImplF16F16F32M16N16K32
    # and ...Bf16Bf16F32M16N16K32: kAMLane 16, kABKLane 4, kABKPerLane 8, kCMLane 4,
    # kCM1PerLane 4. Source 2: IREE mfmaLhs16xK(32) and rocKE _mfma_a_16x16x32 ("hardware-
    # verified to 1e-3; the flat-concat alternative validates only to 1e-2"), mma-lane-maps.md
    # §4c. The AMD calculator has no CDNA4 table.
    "mfma_k32": MmaLayout(
        "mfma_k32", 16, 16, 32, 64, k_group_stride=8,
        k_offsets=tuple(range(8)),
        c_row_group_stride=4, c_row_offsets=tuple(range(4)),
        source="mma-lane-maps.md §4c: CK warp_gemm_attribute_mfma_impl.hpp M16N16K32; IREE "
               "mfmaLhs16xK(32), rocKE (hardware-verified)"),
    # NVIDIA mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 (sm_80+), two
    # of them side by side as one 16x16x16 atom. PTX ISA (8.x numbering) §9.7.14.5.8
    # "Matrix Fragments for mma.m16n8k16 with floating point type": groupID = lane >> 2,
    # threadID_in_group t = lane % 4; A element a_i at row groupID (+8 for i in 2,3,6,7),
    # col 2t + (i & 1) (+8 for i >= 4); B element b_i at row 2t + (i & 1) (+8 for i >= 2),
    # col groupID; C/D c_i at row groupID (+8 for i >= 2), col 2t + (i & 1). Second source:
    # CUTLASS cute/atom/mma_traits_sm80.hpp SM80_16x8x16_F32F16F16F32_TN (ALayout
    # SM80_16x16_Row, BLayout SM80_16x8_Col... i.e. the same (T, V) maps) and LLVM's
    # test/CodeGen/NVPTX wmma/mma tests (4 A, 2 B, 4 C registers per lane).
    # The IR's fragment (8 slots): A slots 0-3 row groupID at k (2t, 2t+1, 2t+8, 2t+9),
    # slots 4-7 row groupID + 8; B slots 0-3 column groupID (instruction 0, n 0-7), 4-7
    # column groupID + 8 (instruction 1, n 8-15); C slots 0-3 instruction 0's c0-c3, 4-7
    # instruction 1's. ``INTRINSICS`` maps slots to registers.
    "m16n8k16": MmaLayout(
        "m16n8k16", 16, 16, 16, 32, k_group_stride=2, k_offsets=(0, 1, 8, 9),
        c_row_group_stride=0, c_row_offsets=(0, 0, 8, 8, 0, 0, 8, 8),
        source="PTX ISA §9.7.14.5.8 (m16n8k16 fragments); CUTLASS SM80_16x8x16 traits",
        mn_lanes=(4, 8), grp_lanes=(1, 4), row_offsets=(0, 8), c_row_mn=1, c_col_mn=0,
        c_col_group_stride=2, c_col_offsets=(0, 1, 0, 1, 8, 9, 8, 9)),
}


def layout(form: str) -> MmaLayout:
    try:
        return LAYOUTS[form]
    except KeyError:
        raise KeyError(f"unknown MMA form {form!r}; valid: {', '.join(LAYOUTS)}") from None


@dataclass(frozen=True)
class MmaIntrinsic:
    """The LLVM intrinsic of one atom form and A/B element type: the exact declaration that
    selects on LLVM 22 (llvm22-amdgpu-facts.md §1).

    The A/B operands are vectors of ``layout(form).ab_elems`` ``operand`` elements and C/D
    of ``c_elems`` floats; the name's overload suffix spells the same (a test holds them
    together).
    """

    name: str  # full, mangled
    operand: str  # A/B element type it takes: "i16" where bf16 travels as integer bits
    style: str  # argument list: "mods" (gfx1250), "plain" (gfx11/gfx12 WMMA), "mfma" (both
    # MFMA forms: A, B, C, cbsz = abid = blgp = 0, the plain layouts of the lane maps)
    # "nvvm" only: the atom is ``len(b_regs)`` instructions; A registers are pairs of IR
    # slots (the same for every instruction), B registers per instruction, C/D slots per
    # instruction (its scalar float operands and results, in order).
    a_regs: tuple[tuple[int, ...], ...] = ()
    b_regs: tuple[tuple[tuple[int, ...], ...], ...] = ()
    c_slots: tuple[tuple[int, ...], ...] = ()
    reg: str = ""  # the register type of one A/B pair: "<2 x half>" or "i32" (bf16 bits)

    @property
    def instructions(self) -> int:
        """Machine MMA instructions per atom: one, or one per B register set (nvvm)."""
        return len(self.b_regs) if self.style == "nvvm" else 1

    def args(self, a: tuple[str, str], b: tuple[str, str],
             c: tuple[str, str]) -> list[tuple[str, str]]:
        """The call's arguments as (LLVM type, value) text, from the typed A, B and C."""
        if self.style == "mods":  # neg_a, A, neg_b, B, c_mod, C, reuse_a, reuse_b (immarg)
            false = ("i1", "0")
            return [false, a, false, b, ("i16", "0"), c, false, false]
        if self.style == "mfma":  # A, B, C, cbsz, abid, blgp
            return [a, b, c, ("i32", "0"), ("i32", "0"), ("i32", "0")]
        return [a, b, c]


# m16n8k16 registers from the IR slots (LAYOUTS["m16n8k16"]): a0 = row g, k 2t..2t+1 (slots
# 0, 1); a1 = row g + 8, same k (4, 5); a2 = row g, k 2t+8.. (2, 3); a3 = row g + 8 (6, 7).
# Instruction h's b0 = column g + 8h, k 2t.. (slots 4h, 4h+1), b1 = k 2t+8.. (4h+2, 4h+3).
_NV_A = ((0, 1), (4, 5), (2, 3), (6, 7))
_NV_B = (((0, 1), (2, 3)), ((4, 5), (6, 7)))
_NV_C = ((0, 1, 2, 3), (4, 5, 6, 7))

# (form, A/B element) -> intrinsic. gfx11/gfx12 WMMA and the 16x16x16 MFMA take bf16 as
# integer vectors (llvm_anyint_ty): the lowering bitcasts; gfx1250 and gfx950's 16x16x32
# MFMA take real bfloat vectors.
INTRINSICS: dict[tuple[str, str], MmaIntrinsic] = {
    ("gfx1250", "f16"): MmaIntrinsic("llvm.amdgcn.wmma.f32.16x16x32.f16.v8f32.v16f16",
                                     "f16", "mods"),
    ("gfx1250", "bf16"): MmaIntrinsic("llvm.amdgcn.wmma.f32.16x16x32.bf16.v8f32.v16bf16",
                                      "bf16", "mods"),
    ("gfx12", "f16"): MmaIntrinsic("llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v8f16",
                                   "f16", "plain"),
    ("gfx12", "bf16"): MmaIntrinsic("llvm.amdgcn.wmma.f32.16x16x16.bf16.v8f32.v8i16",
                                    "i16", "plain"),
    ("gfx11", "f16"): MmaIntrinsic("llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v16f16",
                                   "f16", "plain"),
    ("gfx11", "bf16"): MmaIntrinsic("llvm.amdgcn.wmma.f32.16x16x16.bf16.v8f32.v16i16",
                                    "i16", "plain"),
    ("mfma", "f16"): MmaIntrinsic("llvm.amdgcn.mfma.f32.16x16x16f16", "f16", "mfma"),
    ("mfma", "bf16"): MmaIntrinsic("llvm.amdgcn.mfma.f32.16x16x16bf16.1k", "i16", "mfma"),
    # gfx950 (AMDGPUMFMAIntrinsics950): bf16 as real bfloat vectors; llc-22 -mcpu=gfx950
    # selects both, gfx942 cannot select them (llvm22-amdgpu-facts.md §1)
    ("mfma_k32", "f16"): MmaIntrinsic("llvm.amdgcn.mfma.f32.16x16x32.f16", "f16", "mfma"),
    ("mfma_k32", "bf16"): MmaIntrinsic("llvm.amdgcn.mfma.f32.16x16x32.bf16", "bf16", "mfma"),
    # NVVM's names spell (D, C) types for f16 operands, the A/B type for bf16 (LLVM
    # IntrinsicsNVVM.td MMA_NAME; probe: llc-22 -mcpu=sm_90 selects
    # mma.sync.aligned.m16n8k16.row.col.f32.{f16.f16,bf16.bf16}.f32). Arguments: a0-a3,
    # b0-b1, c0-c3; result {float x 4}. Registers per the PTX fragment tables (LAYOUTS).
    ("m16n8k16", "f16"): MmaIntrinsic(
        "llvm.nvvm.mma.m16n8k16.row.col.f32.f32", "f16", "nvvm",
        a_regs=_NV_A, b_regs=_NV_B, c_slots=_NV_C, reg="<2 x half>"),
    ("m16n8k16", "bf16"): MmaIntrinsic(
        "llvm.nvvm.mma.m16n8k16.row.col.bf16", "i16", "nvvm",
        a_regs=_NV_A, b_regs=_NV_B, c_slots=_NV_C, reg="i32"),
}


def intrinsic(form: str, elem: str) -> MmaIntrinsic:
    """The intrinsic of ``form`` for A/B elements ``elem`` ("f16" or "bf16")."""
    try:
        return INTRINSICS[(form, elem)]
    except KeyError:
        raise KeyError(f"no MMA intrinsic for form {form!r} with {elem} operands; valid: "
                       f"{', '.join(f'{f}/{e}' for f, e in INTRINSICS)}") from None


@dataclass(frozen=True)
class TransposedRead:
    """A wave-wide LDS read that transposes 8x8 blocks of 16-bit elements: what lets a
    K-outer tile (rows of k, contiguous along m / n, as memory holds it) feed an atom whose
    lane holds k values of one row (A) or column (B), at 128 bits a lane, with no transpose
    at LDS-write time.

    Every lane addresses one 16-byte row of 8 elements; lane ``l`` addresses k row
    ``8·((l >> row_bit) & 1) + (l & 7)`` at columns ``8·((l >> col_bit) & 1)`` .. + 7 of the
    fragment's 16-row (m or n) block, at k offset ``k_reads[j]`` for read j of a fragment.
    Afterwards lane ``l`` holds, in slot ``s``, element ``elem(l)`` of the row lane
    ``src(l, s)`` addressed (both maps are data: functions of numpy lane / slot arrays).
    ``tests/kernel`` proves, for each read, that this gives every lane exactly the (row, k)
    its form's ``a_map`` names, slot for slot.
    """

    name: str  # the IR op's arg
    form: str  # the atom form whose fragments it reads
    row_bit: int
    col_bit: int
    k_reads: tuple[int, ...]
    src_map: Callable  # (lane, slot) -> the lane whose addressed row fills that slot
    elem_map: Callable  # lane -> the element (column, 0-7) of that row it receives
    source: str
    secondary_only: bool  # no vendor document states the lane map (say so in ``show``)
    # A's own (row_bit, col_bit) where the MMA takes A's registers in another order than
    # the read lands B's, and ``a_slots``: the IR's A slot s is the read's slot a_slots[s]
    # (a shuffle the lowering folds away). Empty: A is addressed and ordered as B.
    a_bits: tuple[int, int] = ()
    a_slots: tuple[int, ...] = ()

    def provenance(self) -> str:
        """What ``wgradcache show`` says of this read's lane map."""
        head = "secondary sources only" if self.secondary_only else "documented"
        tail = ", unverified on hardware" if self.secondary_only else ""
        return f"{head} ({self.name}: {self.source}){tail}"

    def src(self, lane, slot):
        """The lane whose addressed row lane ``lane`` receives in ``slot``."""
        return self.src_map(np.asarray(lane), np.asarray(slot))

    def elem(self, lane):
        """The element (column, 0-7) of that row lane ``lane`` receives."""
        return self.elem_map(np.asarray(lane))

    def bits(self, operand: str) -> tuple[int, int]:
        """(row_bit, col_bit) of ``operand`` ("a" or "b")."""
        return self.a_bits if operand == "a" and self.a_bits else (self.row_bit, self.col_bit)

    def slots(self, operand: str) -> tuple[int, ...]:
        """The read's slot behind each IR slot of ``operand``'s fragment: () for as read."""
        return self.a_slots if operand == "a" else ()

    def addressed(self, lane, operand: str = "b"):
        """(k row, first column) lane ``lane`` addresses for read 0 of ``operand``'s
        fragment."""
        lane = np.asarray(lane)
        row_bit, col_bit = self.bits(operand)
        return 8 * ((lane >> row_bit) & 1) + (lane & 7), 8 * ((lane >> col_bit) & 1)


TRANSPOSED_READS: dict[str, TransposedRead] = {
    # gfx1250 ds_load_tr16_b128 (llvm.amdgcn.ds.load.tr16.b128): in each 8-lane group G,
    # lane 8G+c receives in slot r element c of the row lane 8G+r addressed. Secondary
    # sources only (mma-lane-maps.md §5, kernel-speed-facts.md): Triton PR #7616 (the same
    # 8-lane 8x8 transpose for gfx12's global_load_tr_b128), a third-party gfx1250 demo
    # (lane L <- LDS[0..7][L]); Triton TargetInfo.cpp queryLDSTransLoadParams and CK
    # amd_transpose_load.hpp agree on the shape. Two reads per gfx1250 fragment (k 0-15 and
    # 16-31 of the k-step, lane group g = l // 16 taking rows 8g .. 8g+7 of each).
    "ds_load_tr16_b128": TransposedRead(
        "ds_load_tr16_b128", "gfx1250", row_bit=4, col_bit=3, k_reads=(0, 16),
        src_map=lambda lane, slot: 8 * (lane // 8) + slot, elem_map=lambda lane: lane % 8,
        source="Triton PR #7616, TargetInfo.cpp queryLDSTransLoadParams; CK "
               "amd_transpose_load.hpp (secondary: no AMD document states the lane map)",
        secondary_only=True),
    # NVIDIA ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 (sm_75+, PTX 6.5), LLVM
    # llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16.p3 -> {i32 x 4} (IntrinsicsNVVM.td
    # NVVM_LDMATRIX, overloaded on the pointer): lanes 8j .. 8j+7 give the row addresses of
    # matrix j; lane l receives one 32-bit register per matrix, and with .trans register j
    # holds elements [2(l%4)][l/4] and [2(l%4)+1][l/4] of matrix j (row, column).
    # Source 1: PTX ISA §9.7.14.5.15 "Warp-level matrix load instruction: ldmatrix" (anchor
    # #warp-level-matrix-instructions-ldmatrix): the thread-to-row-address table, "a group of
    # four threads loads an entire row" (the element layout is a figure), ".trans indicates
    # that the matrix is loaded in column-major format", row addresses naturally aligned
    # (16 bytes), .sync.aligned: every thread of the warp executes the same ldmatrix.
    # Source 2: CUTLASS include/cute/atom/copy_traits_sm75.hpp, Copy_Traits<SM75_U16x8_LDSM_T>
    # DstLayout ((4,8),(16,2,4)):((256,16),(1,128,1024)): thread t, register r, half v holds
    # stored element [2(t%4)+v][t/4] of matrix r (decoded for all 32 lanes: the formula
    # above). Apache TVM's ldmatrix docs agree (lane 8·matrix + row gives the address).
    # B's matrices feed m16n8k16 as b0 b1 of instruction 0 (k 0-7, k 8-15 of n 0-7), then
    # instruction 1's (n 8-15): lane l addresses k row 8·((l>>3)&1) + l%8 at column
    # 8·(l>>4), one read per 16x16 fragment, registers in the order the MMAs take them.
    # A's registers go a0 (rows 0-7, k 0-7), a1 (rows 8-15), a2 (rows 0-7, k 8-15), a3, and
    # HMMA reads them as one aligned quad: addressed as B, the read lands a0 a2 a1 a3 and
    # ptxas copies every fragment into a quad of its own before each use (110 IMAD.MOV a K
    # tile, 64 HMMA, in t128x128x32-w4x1-v8x8). So A's lanes 8-15 address rows 8-15 and
    # 16-23 k 8-15 (row bit 4, column bit 3), and the IR's slots (row g's four k, then row
    # g+8's) are the read's in the order (0, 1, 4, 5, 2, 3, 6, 7).
    "ldmatrix_x4_trans": TransposedRead(
        "ldmatrix_x4_trans", "m16n8k16", row_bit=3, col_bit=4, k_reads=(0,),
        src_map=lambda lane, slot: 8 * (slot // 2) + 2 * (lane % 4) + slot % 2,
        elem_map=lambda lane: lane // 4,
        source="PTX ISA §9.7.14.5.15 ldmatrix (.x4, .trans; element layout in its figure); "
               "CUTLASS cute copy_traits_sm75.hpp SM75_U16x8_LDSM_T DstLayout",
        secondary_only=False, a_bits=(4, 3), a_slots=(0, 1, 4, 5, 2, 3, 6, 7)),
}


def transposed_read(name: str) -> TransposedRead:
    try:
        return TRANSPOSED_READS[name]
    except KeyError:
        raise KeyError(f"unknown transposing LDS read {name!r}; valid: "
                       f"{', '.join(TRANSPOSED_READS)}") from None


def transposed_read_provenance(target: str) -> str:
    """The sources of ``target``'s transposing read's lane map, for ``show``."""
    name = get_target(target).lds_read_tr
    return transposed_read(name).provenance() if name else "none"
