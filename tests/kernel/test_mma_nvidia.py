"""The m16n8k16 atom (sm_90): lane maps and registers against the PTX ISA's fragment tables.

The tables are restated here from the PTX ISA (8.x numbering) §9.7.14.5.8 "Matrix
Fragments for mma.m16n8k16 with floating point type", independently of ``kernel/mma.py``:
groupID = lane >> 2, t = lane % 4; a_i (i = 0..7, two per 32-bit register) at row groupID
(+8 for i in 2, 3, 6, 7), col 2t + (i & 1) (+8 for i >= 4); b_i (i = 0..3) at row
2t + (i & 1) (+8 for i >= 2), col groupID; c_i (i = 0..3) at row groupID (+8 for i >= 2),
col 2t + (i & 1). The atom is two instructions, the second on columns 8-15.
"""

from __future__ import annotations

import numpy as np
import pytest

from wgradcache.kernel import mma

LAY = mma.layout("m16n8k16")


def ptx_a(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return g + (8 if i in (2, 3, 6, 7) else 0), 2 * t + (i & 1) + (8 if i >= 4 else 0)


def ptx_b(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return 2 * t + (i & 1) + (8 if i >= 2 else 0), g


def ptx_c(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return g + (8 if i >= 2 else 0), 2 * t + (i & 1)


@pytest.mark.parametrize("elem", ["f16", "bf16"])
def test_registers_hold_what_the_ptx_tables_say(elem):
    intr = mma.intrinsic("m16n8k16", elem)
    assert intr.style == "nvvm" and len(intr.b_regs) == 2 == len(intr.c_slots)
    for lane in range(32):
        # A: register r holds PTX elements a_{2r}, a_{2r+1}, the same for both instructions
        for r, slots in enumerate(intr.a_regs):
            for half, slot in enumerate(slots):
                row, k = LAY.a_map(lane, slot)
                assert (int(row), int(k)) == ptx_a(lane, 2 * r + half), (lane, slot)
        for h in range(2):
            for r, slots in enumerate(intr.b_regs[h]):
                for half, slot in enumerate(slots):
                    k, col = LAY.b_map(lane, slot)
                    pk, pcol = ptx_b(lane, 2 * r + half)
                    assert (int(k), int(col)) == (pk, pcol + 8 * h), (lane, h, slot)
            for i, slot in enumerate(intr.c_slots[h]):
                row, col = LAY.c_map(lane, slot)
                prow, pcol = ptx_c(lane, i)
                assert (int(row), int(col)) == (prow, pcol + 8 * h), (lane, h, slot)


def test_every_element_once_and_the_slot_sets_partition():
    (a_row, a_k), (c_row, c_col) = LAY.tables()
    assert a_row.shape == (32, 8) and c_row.shape == (32, 8)
    assert len({(int(r), int(k)) for r, k in zip(a_row.ravel(), a_k.ravel(), strict=True)}) == 256
    assert len({(int(r), int(c)) for r, c in zip(c_row.ravel(), c_col.ravel(), strict=True)}) == 256
    intr = mma.intrinsic("m16n8k16", "f16")
    assert sorted(s for r in intr.a_regs for s in r) == list(range(8))
    assert sorted(s for h in intr.b_regs for r in h for s in r) == list(range(8))
    assert sorted(s for h in intr.c_slots for s in h) == list(range(8))


def test_names_and_operand_types():
    f16, bf16 = mma.intrinsic("m16n8k16", "f16"), mma.intrinsic("m16n8k16", "bf16")
    # NVVM spells (D, C) types for f16 operands and the A/B type for bf16 (IntrinsicsNVVM.td)
    assert f16.name == "llvm.nvvm.mma.m16n8k16.row.col.f32.f32" and f16.reg == "<2 x half>"
    assert bf16.name == "llvm.nvvm.mma.m16n8k16.row.col.bf16" and bf16.reg == "i32"


def test_lds_k_order_puts_each_threads_four_k_together():
    assert mma.lds_k_order(LAY) == (0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15)
    assert LAY.run == 4 and LAY.row_offsets == (0, 8)


def test_emulated_atom_is_the_ptx_product():
    """One MMA op in the emulator, lanes filled by the PTX tables (not by mma.py): D equals
    A @ B + C in float64 rounded once to f32."""
    from wgradcache.kernel.builder import KernelBuilder
    from wgradcache.kernel.emulate import emulate
    from wgradcache.kernel.ir import f16, f32, ptr

    rng = np.random.default_rng(1)
    A = rng.standard_normal((16, 16)).astype(np.float16)
    B = rng.standard_normal((16, 16)).astype(np.float16)
    C = rng.standard_normal((16, 16)).astype(np.float32)
    a_in = np.zeros((32, 8), np.float16)
    b_in = np.zeros((32, 8), np.float16)
    c_in = np.zeros((32, 8), np.float32)
    intr = mma.intrinsic("m16n8k16", "f16")
    for lane in range(32):
        for r, slots in enumerate(intr.a_regs):
            for half, slot in enumerate(slots):
                a_in[lane, slot] = A[ptx_a(lane, 2 * r + half)]
        for h in range(2):
            for r, slots in enumerate(intr.b_regs[h]):
                for half, slot in enumerate(slots):
                    k, col = ptx_b(lane, 2 * r + half)
                    b_in[lane, slot] = B[k, col + 8 * h]
            for i, slot in enumerate(intr.c_slots[h]):
                row, col = ptx_c(lane, i)
                c_in[lane, slot] = C[row, col + 8 * h]
    kb = KernelBuilder("one_mma", block_size=32)
    pa, pb = kb.arg("a", ptr(f16)), kb.arg("b", ptr(f16))
    pc, pd = kb.arg("c", ptr(f32)), kb.arg("d", ptr(f32))
    lane = kb.thread_id()
    base = kb.mul(lane, 8)
    d = kb.mma("m16n8k16", kb.load(kb.gep(pa, base), 8), kb.load(kb.gep(pb, base), 8),
               kb.load(kb.gep(pc, base), 8))
    kb.store(kb.gep(pd, base), d)
    out = np.zeros((32, 8), np.float32)
    emulate(kb.finish(), (1, 1, 1), {"a": a_in, "b": b_in, "c": c_in, "d": out})
    want = (A.astype(np.float64) @ B.astype(np.float64) + C).astype(np.float32)
    for lane in range(32):
        for h in range(2):
            for i, slot in enumerate(intr.c_slots[h]):
                row, col = ptx_c(lane, i)
                assert out[lane, slot] == want[row, col + 8 * h]
