"""ds_load_tr16_b128 (gfx1250): the emulator's lane semantics against an independent model,
what it rejects (a misaligned address, part of a wave), and the lowering."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

from wgradcache.kernel.builder import BuildError, KernelBuilder
from wgradcache.kernel.emulate import EmulationError, emulate
from wgradcache.kernel.ir import f16, i16, i32, ptr
from wgradcache.kernel.lower_llvm import LoweringError, lower

ROWS = 64  # 16-byte rows of LDS, 8 x i16 each


def _kernel(block: int = 64, shift: int = 0, partial: bool = False):
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
            kb.store(kb.gep(out, kb.mul(tid, 8)), kb.lds_load_tr(at), align=16)
    else:
        kb.store(kb.gep(out, kb.mul(tid, 8)), kb.lds_load_tr(at), align=16)
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


def test_misaligned_address_is_rejected():
    with pytest.raises(EmulationError, match="not 16-byte aligned"):
        _run(_kernel(shift=8), np.arange(64) % 32)


def test_part_of_a_wave_is_rejected():
    with pytest.raises(EmulationError, match="part of its lanes"):
        _run(_kernel(partial=True), np.arange(64))


def test_lowering_gfx1250_only():
    kd = _kernel()
    text = lower(kd, "gfx1250")
    assert 'call <8 x i16> @"llvm.amdgcn.ds.load.tr16.b128.v8i16"(ptr addrspace(3)' in text
    llvm.parse_assembly(text).verify()
    with pytest.raises(LoweringError, match="no ds_load_tr16_b128 on this target"):
        lower(kd, "gfx1201")
    kb = KernelBuilder("bad", 32)
    with pytest.raises(BuildError, match="16-bit elements"):
        kb.lds_load_tr(kb.lds("x", 64, i32))
    assert kb.lds_load_tr(kb.lds("h", 64, f16)).dtype == f16.vec(8)
