"""The transposing LDS reads (gfx1250 ds_load_tr16_b128, NVIDIA ldmatrix .x4 .trans): the
emulator's lane semantics against independent models written from the sources, what it
rejects (a misaligned address, part of a wave), that each feeds its atom form's fragments
exactly (the lane maps of kernel/mma.py), and the lowerings."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

from wgradcache.kernel import mma
from wgradcache.kernel.builder import BuildError, KernelBuilder
from wgradcache.kernel.emulate import EmulationError, emulate
from wgradcache.kernel.ir import f16, i16, i32, ptr
from wgradcache.kernel.lower import lower
from wgradcache.kernel.lower_llvm import LoweringError

ROWS = 64  # 16-byte rows of LDS, 8 x i16 each


def _kernel(block: int = 64, shift: int = 0, partial: bool = False,
            read: str = "ds_load_tr16_b128"):
    """LDS row j holds 8 j + e (e = 0..7); lane l reads through the row rows[l] (+ shift
    bytes) and writes its 8 results to out[l]."""
    kb = KernelBuilder("tr", block)
    rows, out = kb.arg("rows", ptr(i32)), kb.arg("out", ptr(i16))
    lds = kb.ptr_cast(kb.lds("t", ROWS * 16), i16)
    tid = kb.thread_id()
    for j in range(ROWS * 8 // block):  # fill: element e of row j = 8 j + e
        e = kb.add(tid, j * block)
        kb.store(kb.gep(lds, e), kb.trunc(e, i16))
    kb.barrier()
    row = kb.load(kb.gep(rows, tid))
    at = kb.gep(lds, kb.add(kb.mul(row, 8), shift // 2))
    if partial:
        with kb.if_(kb.icmp("ult", tid, 16)):
            kb.store(kb.gep(out, kb.mul(tid, 8)), kb.lds_load_tr(at, read), align=16)
    else:
        kb.store(kb.gep(out, kb.mul(tid, 8)), kb.lds_load_tr(at, read), align=16)
    return kb.finish()


def _run(kd, rows):
    out = np.full((len(rows), 8), -1, np.int16)
    emulate(kd, (1, 1, 1), {"rows": np.asarray(rows, np.int32), "out": out})
    return out


def test_each_8_lane_group_transposes_its_8_rows():
    rng = np.random.default_rng(7)
    rows = rng.permutation(ROWS)  # every lane a different row, in no order
    got = _run(_kernel(), rows)
    for lane in range(64):
        g, c = divmod(lane, 8)
        # slot r: element c of the row lane 8g + r addressed (8 rows[8g+r] + c)
        want = [8 * rows[8 * g + r] + c for r in range(8)]
        assert got[lane].tolist() == want, lane


def test_lanes_may_share_a_row():
    rows = np.zeros(64, np.int64)
    rows[8:16] = 5
    got = _run(_kernel(), rows)
    assert got[3].tolist() == [3] * 8  # every lane of group 0 addressed row 0
    assert got[9].tolist() == [41] * 8  # group 1: row 5, element 1


def test_ldmatrix_x4_trans_lane_map():
    """PTX ISA ldmatrix: lanes 8j .. 8j+7 address the rows of matrix j; with .trans, lane
    4g + t holds in register j elements (row 2t, col g) and (row 2t + 1, col g)."""
    rng = np.random.default_rng(11)
    rows = rng.permutation(ROWS)
    got = _run(_kernel(read="ldmatrix_x4_trans"), rows)
    for w in range(2):  # two warps of the 64-thread block, each its own instruction
        for lane in range(32):
            g, t = divmod(lane, 4)
            want = [8 * rows[32 * w + 8 * j + 2 * t + e] + g for j in range(4) for e in range(2)]
            assert got[32 * w + lane].tolist() == want, (w, lane)


@pytest.mark.parametrize("operand", ("a", "b"))
@pytest.mark.parametrize("name", sorted(mma.TRANSPOSED_READS))
def test_a_transposing_read_of_a_k_outer_tile_gives_the_form_s_fragment(name, operand):
    """Each lane addresses the row ``addressed`` names for the operand (+ the read's k
    offset); what it receives, in the operand's slot order (``slots``), must be, slot for
    slot, the (row, k) that ``a_map`` of the form assigns it: the generator's K-outer
    fragments are the atom's operands exactly."""
    read = mma.transposed_read(name)
    lay = mma.layout(read.form)
    kb = KernelBuilder("frag", 32)
    out = kb.arg("out", ptr(i16))
    pitch = 24  # elements per K-outer row: 16 columns + a pad, 16-byte aligned
    lds = kb.ptr_cast(kb.lds("t", lay.k * pitch * 2), i16)
    tid = kb.thread_id()
    for j in range(lay.k * pitch // 32):  # element (k, col) holds 64 k + col
        e = kb.add(tid, j * 32)
        k, col = kb.udiv(e, pitch), kb.urem(e, pitch)
        kb.store(kb.gep(lds, e), kb.trunc(kb.add(kb.mul(k, 64), col), i16))
    kb.barrier()
    k_row, col = read.addressed(np.arange(32), operand)
    base = [int(r) * pitch + int(c) for r, c in zip(k_row, col, strict=True)]
    table = kb.arg("base", ptr(i32))
    at = kb.load(kb.gep(table, tid))
    for j, k_off in enumerate(read.k_reads):
        v = kb.lds_load_tr(kb.gep(lds, kb.add(at, k_off * pitch)), name)
        if read.slots(operand):
            v = kb.shuffle(v, v, read.slots(operand))
        kb.store(kb.gep(out, kb.add(kb.mul(tid, 8 * len(read.k_reads)), 8 * j)), v, align=16)
    got = np.zeros((32, 8 * len(read.k_reads)), np.int16)
    emulate(kb.finish(), (1, 1, 1), {"out": got, "base": np.asarray(base, np.int32)})
    lane = np.arange(32)[:, None]
    row, k = lay.a_map(lane, np.arange(lay.ab_elems)[None, :])
    assert np.array_equal(got, np.broadcast_to(64 * k + row, got.shape))


def test_ldmatrix_a_registers_land_in_the_order_the_mma_takes_them():
    """Why A is addressed apart on sm_90: HMMA reads A as one register quad, so A's four
    registers (pairs of IR slots, ``MmaIntrinsic.a_regs``) must be the read's registers
    0-3 in order; B's pairs already are, instruction by instruction. Addressed as B, A's
    would land a0 a2 a1 a3 (what the old order gave: the move per fragment)."""
    read = mma.transposed_read("ldmatrix_x4_trans")
    intr = mma.intrinsic(read.form, "f16")
    order = read.slots("a")
    assert [tuple(order[s] for s in pair) for pair in intr.a_regs] == \
        [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [pair for regs in intr.b_regs for pair in regs] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [intr.a_regs[i] for i in (0, 2, 1, 3)] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert read.bits("a") == (4, 3) and read.bits("b") == (3, 4)


@pytest.mark.parametrize("read", sorted(mma.TRANSPOSED_READS))
def test_misaligned_address_is_rejected(read):
    with pytest.raises(EmulationError, match="not 16-byte aligned"):
        _run(_kernel(shift=8, read=read), np.arange(64) % 32)


@pytest.mark.parametrize("read", sorted(mma.TRANSPOSED_READS))
def test_part_of_a_wave_is_rejected(read):
    with pytest.raises(EmulationError, match="part of its lanes"):
        _run(_kernel(partial=True, read=read), np.arange(64))


def test_lowering_each_read_on_its_target_only():
    kd = _kernel()
    text = lower(kd, "gfx1250")
    assert 'call <8 x i16> @"llvm.amdgcn.ds.load.tr16.b128.v8i16"(ptr addrspace(3)' in text
    llvm.parse_assembly(text).verify()
    with pytest.raises(LoweringError, match="no ds_load_tr16_b128 on this target"):
        lower(kd, "gfx1201")
    with pytest.raises(LoweringError, match="no ds_load_tr16_b128 on this target"):
        lower(kd, "sm_90")
    nv = _kernel(read="ldmatrix_x4_trans")
    text = lower(nv, "sm_90")
    assert ('call {i32, i32, i32, i32} @"llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16.p3"'
            '(ptr addrspace(3)') in text
    assert "bitcast <4 x i32>" in text and "to <8 x i16>" in text
    with pytest.raises(LoweringError, match="no ldmatrix_x4_trans on this target"):
        lower(nv, "gfx1250")
    kb = KernelBuilder("bad", 32)
    with pytest.raises(BuildError, match="16-bit elements"):
        kb.lds_load_tr(kb.lds("x", 64, i32), "ldmatrix_x4_trans")
    with pytest.raises(BuildError, match="unknown transposing read 'ldsm'"):
        kb.lds_load_tr(kb.lds("y", 64, f16), "ldsm")
    assert kb.lds_load_tr(kb.lds("h", 64, f16), "ds_load_tr16_b128").dtype == f16.vec(8)
