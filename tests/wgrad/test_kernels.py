"""Structure of the generated kernels: ABI, LDS bytes, loop shape, symbols, the async range
predicate, the serves gate of run_emulated, and lowering to LLVM IR that llvmlite verifies."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest
from wgrad_cases import PROBLEMS, make_spec

from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.emulate import EmulationError, emulate
from wgradcache.kernel.ir import IfRegion, Ops, f16, i32, ptr, walk
from wgradcache.kernel.lower_llvm import lower
from wgradcache.model.spec import KernelSpec, lds_bytes
from wgradcache.pipeline.emulate import run_emulated
from wgradcache.wgrad.abi import STAGE2_ARGS, WGRAD_ARGS, ir_args
from wgradcache.wgrad.copies import copy_or_zero_fill
from wgradcache.wgrad.kernel import build_kernel, kernel_symbol
from wgradcache.wgrad.stage2 import build_stage2

G = (64, 64, 32, 2, 2)
VARIANTS = [  # (k_loop, epilogue, reduction) as the walk yields them
    ("sync", "default", "none"), ("sync", "default", "atomic"), ("sync", "cshuffle", "none"),
    ("sync", "cshuffle", "atomic"), ("sync", "default", "two_stage"),
    ("async", "default", "none"), ("async", "default", "atomic"),
    ("async", "cshuffle", "none"), ("async", "cshuffle", "atomic")]


def _spec(target, dtype, k_loop, epilogue, reduction, dw=None):
    kw = dict(k_loop=k_loop, epilogue=epilogue, reduction=reduction,
              ws_replicas=8 if reduction == "two_stage" else 0)
    if k_loop == "async":
        kw.update(chunk_a=16, chunk_b=8)
    else:
        kw.update(vec_a=8, vec_b=4)
    return KernelSpec(target, dtype, dw or dtype, *G, **kw)


def _admitted(target, dtype, variant):
    from wgradcache.jobs import default_jobdata
    from wgradcache.model.spec import validate
    return validate(_spec(target, dtype, *variant),
                    limits=default_jobdata().limits_for(target))[0]


LOWER_CASES = [pytest.param(t, d, v, id=f"{t}-{d}-{'.'.join(v)}")
               for t in ("gfx1250", "gfx1201", "gfx1151") for d in ("fp16", "bf16")
               for v in VARIANTS if _admitted(t, d, v)]


@pytest.mark.parametrize("target, dtype, variant", LOWER_CASES)
def test_lowers_and_verifies(target, dtype, variant):
    spec = _spec(target, dtype, *variant)
    kd = build_kernel(spec)
    text = lower(kd, target)
    mod = llvm.parse_assembly(text)
    mod.verify()
    fn = mod.get_function(kernel_symbol(spec))
    assert len(list(fn.arguments)) == len(WGRAD_ARGS)
    header = next(line for line in str(fn).splitlines() if line.startswith("define"))
    assert not fn.is_declaration and "amdgpu_kernel" in header


def test_lower_cases_cover_every_admitted_variant():
    assert len(LOWER_CASES) == 2 * (9 + 4 + 2)  # gfx1250 all 9, gfx1201 4, gfx1151 2


@pytest.mark.parametrize("dw", ("fp16", "bf16", "fp32"))
@pytest.mark.parametrize("replicas", (1, 8))
def test_stage2_lowers_and_verifies(dw, replicas):
    kd = build_stage2("gfx1250", dw, replicas)
    assert kd.name == f"wgrad_stage2_{dw}_wsr{replicas}"
    assert [a.name for a in kd.args] == [a.name for a in STAGE2_ARGS]
    loads = [v for v in walk(kd.body) if v.op is Ops.LOAD]
    assert len(loads) == replicas  # R is compile-time: the fold is unrolled
    llvm.parse_assembly(lower(kd, "gfx1250")).verify()


@pytest.mark.parametrize("variant", VARIANTS)
def test_abi_lds_and_symbol(variant):
    spec = _spec("gfx1250", "fp16", *variant)
    kd = build_kernel(spec)
    assert kd.args == ir_args(WGRAD_ARGS, "fp16", "fp16")
    assert kd.lds_bytes == lds_bytes(spec)
    assert kd.block_size == 4 * 32
    assert kd.name == kernel_symbol(spec) and kd.name.isidentifier()
    assert kd.name == "wgrad_" + spec.label().replace("-", "_")


def _loops(kd):
    return [v for v in walk(kd.body) if v.op is Ops.FOR]


def _loop_ops(loop):
    body = list(walk(loop.arg.body))
    return {op: sum(v.op is op for v in body)
            for op in (Ops.BARRIER, Ops.ASYNC_WAIT, Ops.ASYNC_COPY, Ops.MMA, Ops.LOAD,
                       Ops.STORE)}


def test_sync_loop_shape():
    (loop,) = _loops(build_kernel(_spec("gfx1250", "fp16", "sync", "default", "none")))
    ops = _loop_ops(loop)
    # pipelined over two LDS stages: one barrier per K tile (test_pipelined_sync.py)
    assert ops[Ops.BARRIER] == 1 and ops[Ops.ASYNC_WAIT] == 0 and ops[Ops.ASYNC_COPY] == 0
    assert ops[Ops.MMA] == 2 * 2  # 32x32 per wave = 2x2 atoms, one k step of 32


def test_async_loop_is_one_barrier_ping_pong():
    """Two loops, each phase one wait and one barrier: the steady state over whole tiles,
    whose A chunks are plain copies (no zero store), then the checked phases (the last
    one or two), where every chunk has its zero store."""
    kd = build_kernel(_spec("gfx1250", "fp16", "async", "default", "none"))
    whole, checked = (_loop_ops(lp) for lp in _loops(kd))
    for ops in (whole, checked):
        assert ops[Ops.BARRIER] == 1 and ops[Ops.ASYNC_WAIT] == 1
        # A: 32x64 elements in 16-byte chunks (8) = 256 -> 2 per thread; B 8-byte chunks: 4
        assert ops[Ops.ASYNC_COPY] == 2 + 4
        assert ops[Ops.MMA] == 2 * 2
    assert whole[Ops.STORE] == 4 and checked[Ops.STORE] == 2 + 4  # the zero stores
    waits = [v.arg for v in walk(kd.body) if v.op is Ops.ASYNC_WAIT]
    assert waits == [0, 0]


def _predicate_kernel(unsigned: bool):
    """Each lane copies 16 bytes from src at its own byte offset, or zero-fills."""
    kb = KernelBuilder("pred", 32)
    src = kb.arg("src", ptr(f16))
    out = kb.arg("out", ptr(f16))
    offs = kb.arg("offs", ptr(i32))
    nbytes = kb.arg("nbytes", i32)
    lds = kb.ptr_cast(kb.lds("t", 2 * 32 * 16), f16)  # the slots, then the scratch slots
    lane = kb.thread_id()
    dst = kb.gep(lds, kb.mul(lane, 8))
    kb.store(dst, kb.const(1.0, f16.vec(8)))  # poison: a skipped zero-fill shows as ones
    kb.barrier()
    off = kb.load(kb.gep(offs, lane))
    if unsigned:
        copy_or_zero_fill(kb, src, off, nbytes, lds, kb.mul(lane, 8), kb.const(0, i32),
                          32 * 8, 16)
    else:  # the upstream bug: a signed compare
        ok = kb.icmp("slt", off, nbytes)
        kb.async_copy(kb.gep(kb.ptr_cast(src, f16), kb.ashr(off, 1)), dst, 16, pred=ok)
    kb.async_wait(0)
    kb.barrier()
    kb.store(kb.gep(out, kb.mul(lane, 8)), kb.load(dst, 8, align=16), align=16)
    return kb.finish()


def test_async_predicate_is_unsigned_and_zero_fills():
    src = np.arange(1, 33, dtype=np.float16)  # 64 bytes
    offsets = np.zeros(32, np.int64)
    offsets[:5] = [16, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 48]
    offsets[5] = 64  # exactly num_bytes: out of range
    out = np.full(32 * 8, -1.0, np.float16)
    args = {"src": src, "out": out, "offs": offsets.astype(np.uint32).view(np.int32),
            "nbytes": 32}  # a smaller num_bytes than the buffer: the check is the kernel's
    emulate(_predicate_kernel(True), (1, 1, 1), args)
    rows = out.reshape(32, 8)
    np.testing.assert_array_equal(rows[0], src[8:16])  # byte 16 < 32: copied
    for lane in (1, 2, 3, 4, 5):  # 0x7fffffff, 0x80000000, 0xffffffff, 48, 64 >= 32
        np.testing.assert_array_equal(rows[lane], np.zeros(8, np.float16))
    np.testing.assert_array_equal(rows[6:], np.tile(src[:8], (26, 1)))  # offset 0


def test_async_chunk_is_branch_free():
    """The copy and the zero store are unpredicated: selects choose their LDS slots."""
    kd = _predicate_kernel(True)
    mem = [v for v in walk(kd.body) if (v.op is Ops.ASYNC_COPY or v.op is Ops.STORE
                                         and v.src[0].dtype.addrspace == 3)]
    # the poison, the zero fill, the copy
    assert [v.op for v in mem] == [Ops.STORE, Ops.STORE, Ops.ASYNC_COPY]
    assert all(len(v.src) == 2 for v in mem)  # no predicate operand
    assert not any(isinstance(n, IfRegion) for n in kd.body)


def test_signed_predicate_reads_out_of_bounds():
    offsets = np.zeros(32, np.int64)
    offsets[2] = 0x80000000
    args = {"src": np.zeros(32, np.float16), "out": np.zeros(256, np.float16),
            "offs": offsets.astype(np.uint32).view(np.int32), "nbytes": 64}
    with pytest.raises(EmulationError, match="out of bounds"):
        emulate(_predicate_kernel(False), (1, 1, 1), args)


def test_zero_fill_takes_the_tile_type():
    kd = build_kernel(_spec("gfx1250", "bf16", "async", "default", "none"))
    zero_stores = [v for v in walk(kd.body) if v.op is Ops.STORE
                   and v.src[1].op is Ops.CONST and v.src[0].dtype.addrspace == 3]
    assert zero_stores and {repr(v.src[1].dtype.base) for v in zero_stores} == {"bf16"}


def test_run_emulated_refuses_what_it_cannot_serve():
    stem = PROBLEMS["stem"]
    spec = make_spec("gfx1250", "fp16", G, PROBLEMS["3x3s1p1"], vec=(8, 8))
    with pytest.raises(ValueError, match="cannot serve problem 2,3,9,9,16,3,3,2,1: vec_b 8"):
        run_emulated(spec, stem)
    packed = KernelSpec("gfx1250", "fp16", "fp16", *G, 8, 1, reduction="atomic")
    with pytest.raises(ValueError, match="wg_N=Y\\*X\\*cpg=27 is odd"):
        run_emulated(packed, stem)
    plain = KernelSpec("gfx1250", "fp16", "fp16", *G, 8, 1)
    with pytest.raises(ValueError, match="no split-K reduction"):
        run_emulated(plain, stem, split_k=2)


def test_build_rejects_invalid_spec():
    bad = KernelSpec("gfx1201", "fp16", "fp16", *G, chunk_a=16, chunk_b=16, k_loop="async")
    with pytest.raises(ValueError, match="no async global->LDS copy"):
        build_kernel(bad)


def test_transpose_depth_keeps_every_thread_busy():
    """The deepest group (8 k rows: a 128-bit LDS store) that still gives each of the block's
    threads one; never deeper than the atom's k-step allows."""
    from wgradcache.wgrad.slots import transpose_depth

    assert transpose_depth(32, 128, 8, 256, 32) == 2  # 512 vectors over 256 threads
    assert transpose_depth(32, 32, 1, 32, 16) == 8  # 1024 scalars over one wave
    assert transpose_depth(64, 128, 4, 128, 32) == 8
    assert transpose_depth(32, 32, 8, 128, 16) == 1  # 128 vectors: one each, no group
