"""Builder and verify: the ABI, constants, type rules, region dominance."""

from __future__ import annotations

import numpy as np
import pytest

from wgradcache.kernel.builder import BuildError, KernelBuilder
from wgradcache.kernel.ir import (
    LDS,
    GroupOp,
    KernelArg,
    Ops,
    bf16,
    f16,
    f32,
    format_kernel,
    i1,
    i32,
    i64,
    ptr,
)
from wgradcache.kernel.verify import VerifyError


def test_args_are_the_abi_in_call_order():
    kb = KernelBuilder("k", 64)
    kb.arg("dw", ptr(f32))
    kb.arg("x", ptr(f16), readonly=True, align=256)
    kb.arg("dy", ptr(f16), noalias=False)
    kb.arg("split", i32)
    kb.arg("stride", i64)
    kd = kb.finish()
    assert kd.args == (KernelArg("dw", ptr(f32), True, False, 16),
                       KernelArg("x", ptr(f16), True, True, 256),
                       KernelArg("dy", ptr(f16), False, False, 16),
                       KernelArg("split", i32, False, False, 0),
                       KernelArg("stride", i64, False, False, 0))
    assert [v.arg for v in kd.arg_values] == [0, 1, 2, 3, 4]
    with pytest.raises(BuildError, match="declared twice"):
        kb.arg("dw", ptr(f32))
    with pytest.raises(BuildError, match="must be global"):
        kb.arg("l", ptr(f32, LDS))


def test_lds_allocations_sum():
    kb = KernelBuilder("k", 64)
    p = kb.lds("a", 1000, elem=f16)
    kb.lds("b", 24)
    kd = kb.finish()
    assert p.dtype == ptr(f16, LDS)
    assert kd.lds_bytes == 1024 and kd.lds_alloc("b").nbytes == 24
    with pytest.raises(BuildError, match="declared twice"):
        kb.lds("a", 8)


def test_constants_wrap_and_round_to_their_type():
    kb = KernelBuilder("k", 32)
    assert kb.const(0x80000000, i32).arg == -0x80000000
    assert kb.const(0xFFFFFFFF, i32).arg == -1
    assert kb.const(1, i1).arg == 1
    assert kb.const(0.1, f16).arg == float(np.float16(0.1))
    assert kb.const(1 + 2**-8, bf16).arg == 1.0  # a tie: to even
    assert kb.const(1 + 3 * 2**-8, bf16).arg == 1 + 2**-6
    assert kb.const(2.0, f32.vec(2)).arg == (2.0, 2.0)
    assert kb.const(5, i32) is kb.const(5, i32)  # constants are shared
    with pytest.raises(BuildError, match="not an integer"):
        kb.const(1.5, i32)


def test_type_errors_are_refused_while_building():
    kb = KernelBuilder("k", 32)
    x = kb.arg("x", ptr(f32))
    t = kb.thread_id()
    f = kb.load(kb.gep(x, t))
    with pytest.raises(BuildError, match="operand types differ"):
        kb.add(t, f)
    with pytest.raises(BuildError, match="FADD needs float"):
        kb.fadd(t, t)
    with pytest.raises(BuildError, match="load vector width 5"):
        kb.load(x, 5)
    with pytest.raises(BuildError, match="store of i32 through"):
        kb.store(x, t)
    with pytest.raises(BuildError, match="atomic_add of f16"):
        kb.atomic_add(kb.ptr_cast(x, f16), kb.fpcast(f, f16))
    with pytest.raises(BuildError, match="4, 8 or 16"):
        kb.async_copy(x, kb.lds("l", 64), 2)
    with pytest.raises(BuildError, match="mma gfx1250: needs A, B <16 x f16|bf16>"):
        kb.mma("gfx1250", kb.splat(kb.const(1.0, f16), 8), kb.splat(kb.const(1.0, f16), 8),
               kb.const(0.0, f32.vec(8)))
    with pytest.raises(BuildError, match="icmp predicate"):
        kb.icmp("lt", t, t)
    with pytest.raises(BuildError, match="BITCAST from f32 to <2 x f32>"):
        kb.bitcast(f, f32.vec(2))
    with pytest.raises(BuildError, match="loop step must be positive"):
        with kb.for_(0, 10, 0):
            pass


def test_region_yields_must_match():
    kb = KernelBuilder("k", 32)
    t = kb.thread_id()
    with pytest.raises(BuildError, match="loop yields"):
        with kb.for_(0, 4, 1, carried=[t]) as lp:
            lp.yield_(kb.const(1.0, f32))
    with pytest.raises(BuildError, match="if branches yield"):
        kb.if_else(kb.icmp("eq", t, 0), lambda: t, lambda: kb.const(1.0, f32))


def test_verify_rejects_values_used_outside_their_region():
    kb = KernelBuilder("k", 32)
    out = kb.arg("o", ptr(i32))
    t = kb.thread_id()
    with kb.if_(kb.icmp("eq", t, 0)):
        inner = kb.add(t, 1)
    kb.store(kb.gep(out, t), inner)
    with pytest.raises(VerifyError, match=r"uses %\d+ \(ADD\) which does not dominate it"):
        kb.finish()

    kb = KernelBuilder("k", 32)
    out = kb.arg("o", ptr(i32))
    with kb.for_(0, 4) as lp:
        body_val = kb.mul(lp.index, 2)
    kb.store(out, body_val)
    with pytest.raises(VerifyError, match="does not dominate"):
        kb.finish()


def test_loop_results_and_listing():
    kb = KernelBuilder("k", 32)
    out = kb.arg("o", ptr(i32))
    (s,) = kb.loop(0, 8, 2, [kb.const(0, i32)], lambda i, a: kb.add(a, i))
    kb.store(out, s)
    kd = kb.finish()
    ops = [v.op for v in kd.body]
    assert ops == [Ops.FOR, Ops.LOOP_RESULT, Ops.STORE]
    text = format_kernel(kd)
    assert "for %" in text and "range(0:i32, 8:i32, 2:i32, 0:i32)" in text


def test_structural_key_is_independent_of_ids():
    def build(extra: bool):
        kb = KernelBuilder("k", 32)
        o = kb.arg("o", ptr(i32))
        if extra:
            kb.add(kb.thread_id(), 7)  # shifts every later id
        v = kb.mul(kb.add(kb.thread_id(), 1), 3)
        kb.store(o, v)
        return kb.finish().body[-1]

    a, b = build(False), build(True)
    assert a.id != b.id and a.key == b.key


def test_op_groups_partition_the_alu():
    assert not (GroupOp.IntBinary & GroupOp.FloatBinary)
    assert GroupOp.Predicated <= GroupOp.Memory
    assert all(op in GroupOp.ALU for op in (Ops.ICMP, Ops.SELECT, Ops.FMA, Ops.NOT))


def test_dtypes_are_interned():
    """Equal dtypes are one object however they are made (equality and hashing are by
    identity), also across pickling, copying, ``replace`` and threads."""
    import copy
    import dataclasses
    import pickle
    import threading

    from wgradcache.kernel.ir import DType

    v = f16.vec(8)
    assert DType("f16", 8) is v and v.base is f16 and f16.base is f16
    assert ptr(f16) is DType("ptr", 1, f16, 1) and ptr(f16) is not ptr(f16, LDS)
    assert pickle.loads(pickle.dumps(v)) is v and copy.deepcopy(ptr(bf16)) is ptr(bf16)
    assert dataclasses.replace(i32, count=4) is i32.vec(4)
    assert (v.nbytes, v.bits, v.is_vector, i1.itemsize, i64.is_int, f32.is_float) == (
        16, 16, True, 1, True, True)
    made: list = []

    def make():
        made.extend(DType("i16", n) for n in range(2, 200))

    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(d is DType("i16", d.count) for d in made)
    assert len({id(d) for d in made}) == 198
