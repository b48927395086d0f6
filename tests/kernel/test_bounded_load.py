"""The bounded load (a buffer resource on AMD) and the wave-uniform if: the emulator's range
rule on planted offsets, the verifier's rules, and the lowering LLVM accepts."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

from wgradcache.kernel.builder import BuildError, KernelBuilder
from wgradcache.kernel.emulate import EmulationError, emulate
from wgradcache.kernel.ir import Ops, f16, i32, i64, ptr
from wgradcache.kernel.lower_llvm import lower
from wgradcache.kernel.verify import VerifyError, verify


def _bounded_kernel(vec: int = 8, align: int = 16):
    """Lane l reads ``vec`` halves at byte offs[l] of src, bounded by nbytes; out[l] = it."""
    kb = KernelBuilder("bounded", 32)
    src = kb.arg("src", ptr(f16))
    out = kb.arg("out", ptr(f16))
    offs = kb.arg("offs", ptr(i32))
    nbytes = kb.arg("nbytes", i32)
    lane = kb.thread_id()
    v = kb.bounded_load(src, kb.load(kb.gep(offs, lane)), nbytes, vec, align=align)
    kb.store(kb.gep(out, kb.mul(lane, vec)), v, align=align)
    return kb.finish()


def _run(kd, offsets, nbytes, src_elems=64, vec=8):
    src = np.arange(1, src_elems + 1, dtype=np.float16)
    out = np.full(32 * vec, -1.0, np.float16)
    offs = np.zeros(32, np.int64)
    offs[:len(offsets)] = offsets
    emulate(kd, (1, 1, 1), {"src": src, "out": out, "nbytes": nbytes,
                            "offs": offs.astype(np.uint32).view(np.int32)})
    return src, out.reshape(32, vec)


def test_planted_offsets_read_zero_past_num_bytes():
    """Unsigned compare: 0x7fffffff, 0x80000000 and 0xffffffff are all past num_bytes (a
    signed one would take the last two as negative, i.e. in range); an offset equal to
    num_bytes, or above it inside the real buffer, reads zeros too, with nothing touched."""
    planted = [16, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 48, 64, 112, 0x80000001]
    src, rows = _run(_bounded_kernel(), planted, nbytes=48)  # the buffer holds 128 bytes
    np.testing.assert_array_equal(rows[0], src[8:16])  # bytes 16..31 < 48
    for lane in range(1, 8):
        np.testing.assert_array_equal(rows[lane], np.zeros(8, np.float16))
    np.testing.assert_array_equal(rows[8:], np.tile(src[:8], (24, 1)))  # offset 0


def test_last_access_that_fits_is_read():
    src, rows = _run(_bounded_kernel(), [32], nbytes=48)
    np.testing.assert_array_equal(rows[0], src[16:24])  # 32 + 16 == 48: in range


def test_scalar_bounded_load_checks_per_access():
    kd = _bounded_kernel(vec=1, align=2)
    src, rows = _run(kd, [46, 48, 0xFFFFFFFE, 2], nbytes=48, vec=1)
    assert rows[:4, 0].tolist() == [src[23], 0.0, 0.0, src[1]]


def test_an_access_across_num_bytes_is_an_error():
    with pytest.raises(EmulationError, match="crosses num_bytes 48"):
        _run(_bounded_kernel(), [40], nbytes=48)


def test_num_bytes_past_the_buffer_is_caught():
    with pytest.raises(EmulationError, match="out of bounds"):
        _run(_bounded_kernel(), [128], nbytes=4096)  # in range, past the 128-byte buffer


def test_misaligned_in_range_access_is_an_error_and_past_range_is_not():
    with pytest.raises(EmulationError, match="not 16-byte aligned"):
        _run(_bounded_kernel(), [8], nbytes=128)
    _run(_bounded_kernel(), [0x80000008], nbytes=128)  # past the range: no access, no check


def test_builder_and_verifier_rules():
    kb = KernelBuilder("b", 32)
    src = kb.arg("src", ptr(f16))
    n = kb.arg("n", i32)
    with pytest.raises(BuildError, match="global pointer argument"):
        kb.bounded_load(kb.gep(src, 4), 0, n)
    with pytest.raises(BuildError, match="num_bytes must be an i32"):
        kb.bounded_load(src, 0, kb.zext(n, i64))
    with pytest.raises(BuildError, match="base offset must be an i32"):
        kb.bounded_load(src, 0, n, base=kb.zext(n, i64))
    with pytest.raises(BuildError, match="6 bytes"):
        kb.bounded_load(src, 0, n, 3)
    v = kb.bounded_load(src, kb.thread_id(), n, 4)
    assert (v.op, v.dtype, v.arg) == (Ops.BOUNDED_LOAD, f16.vec(4), 2)
    kd = kb.finish()
    # a hand-made kernel with a 64-bit size, or five operands, fails verification
    from wgradcache.kernel.ir import KernelDef, Value
    wide = Value(Ops.CONST, i64, (), 7, 998)
    for srcs, why in (((kd.arg_values[0], kd.arg_values[1], wide), "num_bytes"),
                      ((kd.arg_values[0], kd.arg_values[1], kd.arg_values[1],
                        kd.arg_values[1], kd.arg_values[1]), "5 operands")):
        bad = Value(Ops.BOUNDED_LOAD, f16, srcs, 2, 999)
        with pytest.raises(VerifyError, match=why):
            verify(KernelDef(kd.name, kd.args, kd.block_size, kd.lds, (bad,), kd.arg_values))


@pytest.mark.parametrize("target, word3", [("gfx1250", 0x31004000), ("gfx1201", 0x31004000),
                                           ("gfx1151", 0x31004000)])
def test_lowering_makes_one_resource_per_pair(target, word3):
    kb = KernelBuilder("lw", 64)
    src, out = kb.arg("src", ptr(f16)), kb.arg("out", ptr(f16))
    n = kb.arg("n", i32)
    lane = kb.thread_id()
    a = kb.bounded_load(src, kb.mul(lane, 16), n, 8, align=16)
    b = kb.bounded_load(src, kb.add(kb.mul(lane, 16), 4096), n, 8, align=16)
    c = kb.bounded_load(src, kb.mul(lane, 2), n)
    kb.store(kb.gep(out, kb.mul(lane, 8)), a, align=16)
    kb.store(kb.gep(out, kb.add(kb.mul(lane, 8), 512)), b, align=16)
    kb.store(kb.gep(out, kb.add(lane, 1024)), c)
    text = lower(kb.finish(), target)
    assert text.count("call ptr addrspace(8) @\"llvm.amdgcn.make.buffer.rsrc.p8.p1\"") == 1
    assert f"i16 0, i64 %\"rsrc.1.3.n\", i32 {word3})" in text
    assert text.count("@\"llvm.amdgcn.raw.ptr.buffer.load.v4i32\"(") == 3  # 2 calls + declare
    assert "@\"llvm.amdgcn.raw.ptr.buffer.load.i16\"" in text
    assert "bitcast <4 x i32>" in text and "bitcast i16" in text
    llvm.parse_assembly(text).verify()


def _uniform_if_kernel(boundary: int):
    kb = KernelBuilder("u", 64)
    out = kb.arg("out", ptr(i32))
    tid = kb.thread_id()
    with kb.if_(kb.icmp("ult", tid, boundary), uniform=32):
        kb.store(kb.gep(out, tid), kb.add(tid, 1))
    return kb.finish()


def test_uniform_if_runs_whole_waves():
    out = np.zeros(64, np.int32)
    emulate(_uniform_if_kernel(32), (1, 1, 1), {"out": out})
    assert out.tolist() == list(range(1, 33)) + [0] * 32


def test_uniform_if_with_a_divergent_predicate_is_an_error():
    with pytest.raises(EmulationError, match="predicate differs within lanes 0-31"):
        emulate(_uniform_if_kernel(20), (1, 1, 1), {"out": np.zeros(64, np.int32)})


def test_uniform_if_lowers_to_readfirstlane():
    text = lower(_uniform_if_kernel(32), "gfx1201")
    assert "call i32 @\"llvm.amdgcn.readfirstlane.i32\"(i32 %\"if" in text
    llvm.parse_assembly(text).verify()
    kb = KernelBuilder("x", 32)
    with pytest.raises(BuildError, match="power of two"):
        with kb.if_(kb.icmp("eq", kb.thread_id(), 0), uniform=3):
            pass


# ---- a record that moves: start and num_bytes computed, workgroup-uniform ------------------

def _moving_kernel(start_of=None, num_of=None):
    """Workgroup g reads through the record [g·64, nbytes) bytes of src: lane l at offs[l]
    (8 halves) into out[g, l]. ``start_of`` / ``num_of`` (kb, g, lane, nbytes) -> Value
    replace the start or the size, to plant a non-uniform one."""
    kb = KernelBuilder("moving", 32)
    src, out = kb.arg("src", ptr(f16)), kb.arg("out", ptr(f16))
    offs, nbytes = kb.arg("offs", ptr(i32)), kb.arg("nbytes", i32)
    lane, g = kb.thread_id(), kb.workgroup_id(0)
    start = start_of(kb, g, lane, nbytes) if start_of else kb.mul(g, 64)
    num = num_of(kb, g, lane, nbytes) if num_of else kb.smax(kb.sub(nbytes, start), 0)
    v = kb.bounded_load(src, kb.load(kb.gep(offs, lane)), num, 8, align=16, base=start)
    kb.store(kb.gep(out, kb.mul(kb.add(kb.mul(g, 32), lane), 8)), v, align=16)
    return kb.finish()


def _run_moving(kd, offsets, nbytes, groups=3, src_elems=128):
    src = np.arange(1, src_elems + 1, dtype=np.float16)
    out = np.full(groups * 32 * 8, -1.0, np.float16)
    offs = np.zeros(32, np.int64)
    offs[:len(offsets)] = offsets
    emulate(kd, (groups, 1, 1), {"src": src, "out": out, "nbytes": nbytes,
                                 "offs": offs.astype(np.uint32).view(np.int32)})
    return src, out.reshape(groups, 32, 8)


def test_moving_record_reads_from_its_start_and_zero_past_its_end():
    """Workgroup g's record starts at byte 64·g and ends at nbytes: offset 0 reads element
    32·g; the planted offsets 0x7fffffff / 0x80000000 / 0xffffffff and any offset at or past
    the record's end read zeros (workgroup 2's record is 64 bytes: its offset 64 is out,
    though byte 192 of the 256-byte buffer exists); past nbytes the size is 0, all zeros."""
    planted = [0, 16, 48, 64, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]
    src, rows = _run_moving(_moving_kernel(), planted, nbytes=192, groups=4)
    for g, left in enumerate((192, 128, 64, 0)):
        for lane, off in enumerate(planted):
            want = src[(64 * g + off) // 2:(64 * g + off) // 2 + 8] \
                if off + 16 <= left else np.zeros(8, np.float16)
            np.testing.assert_array_equal(rows[g, lane], want, err_msg=f"wg {g} lane {lane}")


def test_moving_record_checks_the_real_buffer_and_its_edge():
    # a record that claims more than the buffer holds: the access past the buffer is caught
    with pytest.raises(EmulationError, match="out of bounds"):
        _run_moving(_moving_kernel(), [256], nbytes=4096, groups=1)  # a 256-byte buffer
    # an access crossing the moving record's end is the chip-dependent case
    with pytest.raises(EmulationError, match="crosses num_bytes 56"):
        _run_moving(_moving_kernel(num_of=lambda kb, g, lane, n: kb.const(56, i32)), [48],
                    nbytes=256, groups=1)


@pytest.mark.parametrize("which", ["start", "num"])
def test_moving_record_must_be_one_value_per_workgroup(which):
    lane_dependent = lambda kb, g, lane, n: kb.mul(lane, 16)  # noqa: E731
    same = lambda kb, g, lane, n: n  # noqa: E731
    kd = _moving_kernel(start_of=lane_dependent, num_of=same) if which == "start" else \
        _moving_kernel(num_of=lane_dependent)
    name = "the record's start" if which == "start" else "num_bytes"
    with pytest.raises(EmulationError, match=f"{name} differs within workgroup .*lane 1"):
        _run_moving(kd, [0], nbytes=256, groups=1)


def test_moving_record_lowering():
    """AMD: the resource is made at the load from p + start (a gep), and compiles to one
    scalar resource per tile, no waterfall loop over lanes (s_and_saveexec). NVIDIA: the
    start moves the address, num_bytes is the compare."""
    from wgradcache.compile.codegen import compile_ir
    kd = _moving_kernel()
    text = lower(kd, "gfx1250")
    assert "getelementptr i8, ptr addrspace(1) %\"src\", i64" in text
    assert text.count("call ptr addrspace(8) @\"llvm.amdgcn.make.buffer.rsrc.p8.p1\"") == 1
    llvm.parse_assembly(text).verify()
    asm = compile_ir(text, "gfx1250", listing="disassembly").asm
    assert "buffer_load_b128" in asm and "s_and_saveexec" not in asm
    from wgradcache.kernel.lower import lower as lower_any
    nv = lower_any(kd, "sm_90")
    assert '.base" = getelementptr i8, ptr addrspace(1) %"src"' in nv and "icmp ult i32" in nv
    llvm.parse_assembly(nv).verify()
