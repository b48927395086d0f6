"""NVIDIA's zero-filling async copy (``ASYNC_COPY_ZFILL``, cp.async with src-size): lane
semantics in the emulator, per-lane completion against gfx1250's per-wave count, the
rejections, and the NVPTX lowering (PTX and the SASS ptxas makes of it)."""

from __future__ import annotations

import numpy as np
import pytest

from wgradcache.kernel.builder import BuildError, KernelBuilder
from wgradcache.kernel.emulate import EmulationError, emulate
from wgradcache.kernel.ir import Ops, f16, i8, i32, ptr
from wgradcache.kernel.lower import LoweringError, lower
from wgradcache.kernel.verify import VerifyError, verify

LANES = 64


def zfill_kernel(nbytes: int = 16, *, keep_rule: str = "even", src_shift: int = 0,
                 dst_shift: int = 0, wait: str = "all", far: int = 0x7FFFFFF0):
    """Each lane copies ``nbytes`` of g at its own offset into LDS, kept where ``keep_rule``
    holds; a dropped lane's source is ``far`` bytes past g (never read). ``wait``: "all"
    lanes wait, "not0" every lane but 0. After a barrier each lane stores its neighbour's
    bytes (lane ^ 1) to o."""
    kb = KernelBuilder("z", LANES)
    g, o = kb.arg("g", ptr(i8)), kb.arg("o", ptr(i8))
    buf = kb.lds("t", LANES * 16 + 16, elem=i8)
    t = kb.thread_id()
    keep = {"even": kb.icmp("eq", kb.and_(t, 1), 0), "all": kb.icmp("sge", t, 0)}[keep_rule]
    off = kb.add(kb.mul(t, nbytes), src_shift)
    src = kb.gep(g, kb.select(keep, off, kb.const(far, i32)))
    kb.async_copy_zfill(src, kb.gep(buf, kb.add(kb.mul(t, 16), dst_shift)), nbytes, keep)
    if wait == "all":
        kb.async_wait(0)
    else:
        with kb.if_(kb.icmp("ne", t, 0)):
            kb.async_wait(0)
    kb.barrier()
    other = kb.mul(kb.xor(t, 1), 16)
    for j in range(nbytes):
        kb.store(kb.gep(o, kb.add(kb.mul(t, 16), j)), kb.load(kb.gep(buf, kb.add(other, j))))
    return kb.finish()


def _run(kd, nbytes=16):
    g = (np.arange(LANES * nbytes + 64) % 251 + 1).astype(np.uint8)
    o = np.full(LANES * 16, 0xAA, np.uint8)
    rep = emulate(kd, (1, 1, 1), {"g": g, "o": o})
    return g, o.reshape(LANES, 16), rep


@pytest.mark.parametrize("nbytes", [4, 8, 16])
def test_kept_lanes_copy_dropped_lanes_land_zeros_without_reading(nbytes):
    """Odd lanes drop their chunk: their source is ~2 GiB past the buffer (would be out of
    bounds) and is not read; their LDS bytes are zeros, not the 0xFF the LDS starts with."""
    g, o, rep = _run(zfill_kernel(nbytes), nbytes)
    assert rep.async_copies == 1
    for lane in range(LANES):
        src = lane ^ 1  # the lane whose bytes this one stored
        want = g[src * nbytes:(src + 1) * nbytes] if src % 2 == 0 else np.zeros(nbytes)
        np.testing.assert_array_equal(o[lane, :nbytes], want)
        assert np.all(o[lane, nbytes:] == 0xAA)


def test_completion_is_per_lane_unlike_gfx1250s_per_wave_count():
    """Lane 0 skips the wait: its copy is still in flight at the barrier, whatever lanes
    1..31 of its warp waited for, so lane 1's read of it is an error. The same program with
    gfx1250's ASYNC_COPY is fine: one lane's wait retires the whole wave's copies."""
    with pytest.raises(EmulationError, match=r"async copy of lane 0 into it is in flight"):
        _run(zfill_kernel(keep_rule="all", wait="not0"))

    kb = KernelBuilder("w", LANES)
    g, o = kb.arg("g", ptr(i8)), kb.arg("o", ptr(i8))
    buf = kb.lds("t", LANES * 16, elem=i8)
    t = kb.thread_id()
    kb.async_copy(kb.gep(g, kb.mul(t, 16)), kb.gep(buf, kb.mul(t, 16)), 16)
    with kb.if_(kb.icmp("ne", t, 0)):
        kb.async_wait(0)
    kb.barrier()
    kb.store(kb.gep(o, t), kb.load(kb.gep(buf, kb.mul(kb.xor(t, 1), 16))))
    g_ = (np.arange(LANES * 16) % 251).astype(np.uint8)
    o_ = np.zeros(LANES, np.uint8)
    emulate(kb.finish(), (1, 1, 1), {"g": g_, "o": o_})
    np.testing.assert_array_equal(o_, g_.reshape(LANES, 16)[np.arange(LANES) ^ 1, 0])


def test_wait_retires_only_the_waiting_lanes_own_copies_then_the_kernel_ends_clean():
    kb = KernelBuilder("e", 32)
    g = kb.arg("g", ptr(i8))
    buf = kb.lds("t", 32 * 4, elem=i8)
    t = kb.thread_id()
    keep = kb.icmp("sge", t, 0)
    kb.async_copy_zfill(kb.gep(g, kb.mul(t, 4)), kb.gep(buf, kb.mul(t, 4)), 4, keep)
    with kb.if_(kb.icmp("ne", t, 5)):
        kb.async_wait(0)
    with pytest.raises(EmulationError, match=r"still in flight at the end of the kernel "
                                             r"\(workgroup \(0,0,0\), lane 5\)"):
        emulate(kb.finish(), (1, 1, 1), {"g": np.zeros(128, np.uint8)})


@pytest.mark.parametrize("keep_rule, src_shift, dst_shift, far, where", [
    ("all", 8, 0, 0, "byte 8 of buffer 'g'"),     # a kept lane's source, 8 B off
    ("all", 0, 8, 0, "byte 8 of LDS allocation 't'"),
    ("even", 0, 0, 0x7FFFFFF4, "byte 2147483636 of buffer 'g'"),  # a dropped lane's too
])
def test_misaligned_copy_is_rejected(keep_rule, src_shift, dst_shift, far, where):
    with pytest.raises(EmulationError, match=f"{where} is not 16-byte aligned"):
        _run(zfill_kernel(16, keep_rule=keep_rule, src_shift=src_shift, dst_shift=dst_shift,
                          far=far or 0x7FFFFFF0))


def test_kept_lane_out_of_bounds_is_an_error():
    with pytest.raises(EmulationError, match="out of bounds"):
        _run(zfill_kernel(16, keep_rule="all", src_shift=1 << 20))


def test_dropped_lane_copy_still_races_with_unsynchronised_reads():
    """Zeros land like data: a read of them before the wait is a read of bytes in flight."""
    kb = KernelBuilder("r", 32)
    o = kb.arg("o", ptr(i8))
    g = kb.arg("g", ptr(i8))
    buf = kb.lds("t", 32 * 4, elem=i8)
    t = kb.thread_id()
    kb.async_copy_zfill(kb.gep(g, kb.mul(t, 4)), kb.gep(buf, kb.mul(t, 4)), 4,
                        kb.icmp("slt", t, 0))  # every lane drops: zeros only
    kb.store(kb.gep(o, t), kb.load(kb.gep(buf, kb.mul(t, 4))))
    kb.async_wait(0)
    with pytest.raises(EmulationError, match="in flight"):
        emulate(kb.finish(), (1, 1, 1), {"o": np.zeros(32, np.uint8),
                                         "g": np.zeros(4, np.uint8)})


def test_builder_and_verifier_refuse_malformed_copies():
    kb = KernelBuilder("b", 32)
    g = kb.arg("g", ptr(f16))
    buf = kb.lds("t", 256, elem=f16)
    with pytest.raises(BuildError, match="keep must be i1"):
        kb.async_copy_zfill(g, buf, 16, kb.thread_id())
    with pytest.raises(BuildError, match="12 bytes"):
        kb.async_copy_zfill(g, buf, 12, kb.icmp("eq", kb.thread_id(), 0))
    with pytest.raises(BuildError, match="destination must be an LDS pointer"):
        kb.async_copy_zfill(g, g, 16, kb.icmp("eq", kb.thread_id(), 0))
    # the keep operand is mandatory: a ZFILL without it does not verify
    kb.async_copy_zfill(g, buf, 16, kb.icmp("eq", kb.thread_id(), 0))
    kd = kb.finish()
    v = next(v for v in kd.body if v.op is Ops.ASYNC_COPY_ZFILL)
    object.__setattr__(v, "src", v.src[:2])
    with pytest.raises(VerifyError, match="2 operands"):
        verify(kd)


def _lowered(target: str, nbytes: int = 16) -> str:
    return lower(zfill_kernel(nbytes), target)


@pytest.mark.parametrize("nbytes, intrinsic", [
    (16, "llvm.nvvm.cp.async.cg.shared.global.16.s"),
    (8, "llvm.nvvm.cp.async.ca.shared.global.8.s"),
    (4, "llvm.nvvm.cp.async.ca.shared.global.4.s")])
def test_nvptx_lowering_is_cp_async_with_src_size(nbytes, intrinsic):
    text = _lowered("sm_90", nbytes)
    call = next(line for line in text.splitlines() if f'@"{intrinsic}"(' in line
                and "call" in line)
    size = call.rsplit("i32 ", 1)[1].rstrip(")")
    assert f"{size} = select i1 " in text and f"i32 {nbytes}, i32 0" in text
    assert 'call void @"llvm.nvvm.cp.async.wait.all"()' in text
    assert "amdgcn" not in text


def test_nvptx_ptx_and_sass():
    """llc-22 selects cp.async with the src-size register; ptxas makes LDGSTS of it."""
    from wgradcache.compile.codegen import compile_ir

    obj = compile_ir(_lowered("sm_90"), "sm_90")
    assert "LDGSTS.E.BYPASS.128" in obj.asm and "LDGDEPBAR" in obj.asm
    assert "DEPBAR.LE SB0, 0x0" in obj.asm


def test_lowerings_refuse_the_other_vendors_copy_and_partial_waits():
    with pytest.raises(LoweringError, match="no zero-filling async copy on this target"):
        _lowered("gfx1250")
    kb = KernelBuilder("a", 32)
    g = kb.arg("g", ptr(i8))
    buf = kb.lds("t", 128, elem=i8)
    t = kb.thread_id()
    kb.async_copy(kb.gep(g, kb.mul(t, 4)), kb.gep(buf, kb.mul(t, 4)), 4)
    kb.async_wait(0)
    with pytest.raises(LoweringError, match="ASYNC_COPY does not exist on NVIDIA"):
        lower(kb.finish(), "sm_90")
    kb = KernelBuilder("n", 32)
    g = kb.arg("g", ptr(i8))
    buf = kb.lds("t", 128, elem=i8)
    t = kb.thread_id()
    kb.async_copy_zfill(kb.gep(g, kb.mul(t, 4)), kb.gep(buf, kb.mul(t, 4)), 4,
                        kb.icmp("sge", t, 0))
    kb.async_wait(1)
    kb.async_wait(0)
    with pytest.raises(LoweringError, match=r"async_wait\(1\): only a wait for all"):
        lower(kb.finish(), "sm_90")
