"""Small kernels shared by the emulator and lowering tests (built with the public builder)."""

from __future__ import annotations

from wgradcache.kernel import mma
from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import KernelDef, f32, i32, ptr

WMMA_FORMS = ("gfx1250", "gfx12", "gfx11")
MFMA_FORMS = ("mfma", "mfma_k32")
FORM_TARGET = {"gfx1250": "gfx1250", "gfx12": "gfx1201", "gfx11": "gfx1151", "mfma": "gfx942",
               "mfma_k32": "gfx950"}


def gemm_tile(form: str, dt, *, waves: int = 2, barrier_before_mma: bool = True,
              barrier_after_mma: bool = True, use_async: bool = False,
              wait_async: bool = True) -> KernelDef:
    """D[M, 16] = A[M, K] B[K, 16] with M = 16*waves; each wave owns one 16x16xK tile.

    Per K step of one atom the whole block stages A and B in LDS (plain loads + LDS stores,
    or gfx1250 async copies of 4 bytes), then every wave reads its fragments from LDS with the
    lane maps of ``mma.layout(form)``. The flags remove synchronisation to plant bugs.
    """
    lay = mma.layout(form)
    W, ka = lay.wave_size, lay.k
    block = W * waves
    M = 16 * waves
    esz = dt.itemsize
    kb = KernelBuilder(f"gemm_{form}_{dt.scalar}", block)
    A, B = kb.arg("a", ptr(dt), readonly=True), kb.arg("b", ptr(dt), readonly=True)
    D = kb.arg("d", ptr(f32))
    K = kb.arg("k", i32)
    lds_a = kb.lds("lds_a", M * ka * esz, elem=dt)
    lds_b = kb.lds("lds_b", ka * 16 * esz, elem=dt)
    tid = kb.thread_id()
    wave, lane = kb.udiv(tid, W), kb.urem(tid, W)
    c16, g = kb.urem(lane, 16), kb.udiv(lane, 16)
    per = 4 // esz if use_async else 1  # elements per copy

    def stage(k0, rows, cols, src, row_stride, dst):
        """Copy a rows x cols tile (row-major, src row stride) into dst (row-major)."""
        n = rows * cols // per
        for j in range(-(-n // block)):
            e = kb.add(tid, j * block)
            e = kb.mul(e, per)
            r, c = kb.udiv(e, cols), kb.urem(e, cols)
            s = kb.gep(src, kb.add(kb.mul(kb.add(r, k0[0]), row_stride), kb.add(c, k0[1])))
            d = kb.gep(dst, kb.add(kb.mul(r, cols), c))
            inside = kb.icmp("ult", e, rows * cols) if n % block else None
            if use_async:
                kb.async_copy(s, d, 4, pred=inside)
            else:
                kb.store(d, kb.load(s, pred=inside), pred=inside)

    zero = kb.const(0.0, f32.vec(lay.c_elems))
    with kb.for_(0, K, ka, carried=[zero]) as loop:
        k0 = loop.index
        stage((0, k0), M, ka, A, K, lds_a)  # A rows 0..M-1, k0..k0+ka-1
        stage((k0, 0), ka, 16, B, 16, lds_b)  # B rows k0.., all 16 cols
        if use_async and wait_async:
            kb.async_wait(0)
        if barrier_before_mma:
            kb.barrier()
        row = kb.add(kb.mul(wave, 16), c16)
        kbase = kb.mul(g, lay.k_group_stride)
        parts = []
        for _slot, off, n in mma.k_runs(lay):
            p = kb.gep(lds_a, kb.add(kb.mul(row, ka), kb.add(kbase, off)))
            parts.append(kb.load(p, n, align=min(16, n * esz)))
        a = kb.concat(*parts)
        b = kb.vec(*(kb.load(kb.gep(lds_b, kb.add(kb.mul(kb.add(kbase, off), 16), c16)))
                     for off in lay.k_offsets))
        acc = kb.mma(form, a, b, loop.carried[0])
        if barrier_after_mma:
            kb.barrier()
        loop.yield_(acc)
    acc = loop.results[0]
    for r, roff in enumerate(lay.c_row_offsets):
        row = kb.add(kb.add(kb.mul(wave, 16), kb.mul(g, lay.c_row_group_stride)), roff)
        kb.store(kb.gep(D, kb.add(kb.mul(row, 16), c16)), kb.extract(acc, r))
    return kb.finish()


def every_op(target_form: str, *, async_copy: bool, packed_atomics: bool = True) -> KernelDef:
    """One kernel using every op kind once (for lowering/compile coverage).

    Arguments: ``x`` f32[block], ``h`` f16[2*block], ``o`` f32[block], ``acc`` f32[1],
    ``hacc`` f16[2], ``n`` i32.
    """
    from wgradcache.kernel.ir import bf16, f16, i1, i8, i16, i64

    lay = mma.layout(target_form)
    block = max(64, lay.wave_size)
    kb = KernelBuilder(f"every_op_{target_form}", block)
    x, h = kb.arg("x", ptr(f32), readonly=True), kb.arg("h", ptr(f16), readonly=True)
    o, acc = kb.arg("o", ptr(f32)), kb.arg("acc", ptr(f32), noalias=False)
    hacc = kb.arg("hacc", ptr(f16))
    bacc = kb.arg("bacc", ptr(bf16))
    n = kb.arg("n", i32)
    lds = kb.lds("scratch", block * 8, elem=f32)
    t = kb.thread_id()
    wg = kb.add(kb.add(kb.workgroup_id(0), kb.workgroup_id(1)), kb.workgroup_id(2))
    i = kb.add(kb.mul(wg, block), t)
    ints = [getattr(kb, name)(i, 3) for name in
            ("add", "sub", "mul", "udiv", "urem", "sdiv", "srem", "shl", "lshr", "ashr",
             "and_", "or_", "xor", "smin", "smax", "umin", "umax")]
    s = ints[0]
    for v in ints[1:]:
        s = kb.add(s, v)
    s = kb.xor(s, kb.not_(i))
    ok = kb.icmp("ult", i, n)
    xv = kb.load(kb.gep(x, i), pred=ok)
    hv = kb.load(kb.gep(h, kb.mul(i, 2)), 2, align=4, pred=ok)
    fl = [getattr(kb, name)(xv, 1.5) for name in ("fadd", "fsub", "fmul", "fdiv", "fmin",
                                                    "fmax")]
    f = kb.fma(fl[0], fl[1], kb.fneg(fl[2]))
    f = kb.select(kb.fcmp("olt", f, fl[3]), f, kb.fadd(fl[4], fl[5]))
    f = kb.select(kb.fcmp("uno", f, f), fl[0], f)
    h2 = kb.fpcast(hv, f32)
    f = kb.fadd(f, kb.fadd(kb.extract(h2, 0), kb.extract(h2, 1)))
    b16 = kb.fpcast(kb.fpcast(f, bf16), f16)  # f32 -> bf16 -> f16 -> f32
    f = kb.fadd(f, kb.fpcast(b16, f32))
    f = kb.fadd(f, kb.sitofp(s, f32))
    f = kb.fadd(f, kb.uitofp(kb.zext(kb.trunc(s, i8), i16), f32))
    big = kb.sext(kb.fptosi(f, i32), i64)
    f = kb.fadd(f, kb.sitofp(kb.trunc(big, i32), f32))
    f = kb.fadd(f, kb.uitofp(kb.fptoui(kb.fmax(f, 0.0), i32), f32))
    bits = kb.bitcast(hv, i32)
    f = kb.fadd(f, kb.sitofp(kb.and_(bits, 255), f32))
    flag = kb.zext(kb.icmp("sge", s, 0), i32)
    f = kb.fadd(f, kb.sitofp(kb.add(flag, kb.zext(kb.trunc(flag, i1), i32)), f32))
    vec = kb.vec(f, xv, f, xv)
    vec = kb.insert(vec, kb.const(2.0, f32), 1)
    sh = kb.shuffle(vec, vec, [0, 5, 2, 7])
    f = kb.fadd(kb.extract(sh, 0), kb.extract(kb.subvec(sh, 1, 2), 1))
    # LDS round trip with a barrier, through a pointer cast
    kb.store(kb.gep(lds, t), f)
    kb.barrier()
    raw = kb.ptr_cast(lds, i32)
    other = kb.bitcast(kb.load(kb.gep(raw, kb.xor(t, 1))), f32)
    kb.barrier()
    # a loop with a carried value and an if/else yielding one
    (total,) = kb.loop(0, n, 1, [other], lambda k, a: kb.fadd(a, kb.sitofp(k, f32)))
    (res,) = kb.if_else(ok, lambda: kb.fmul(total, 2.0), lambda: total)
    if async_copy:
        chunk = kb.ptr_cast(kb.gep(lds, block), f32)
        kb.async_copy(kb.gep(x, i), kb.gep(chunk, t), 4, pred=ok)
        kb.async_wait(0)
        kb.barrier()
        res = kb.fadd(res, kb.load(kb.gep(chunk, kb.xor(t, 0)), pred=ok))
    # one MMA atom on constant-ish fragments
    ab = kb.splat(kb.fpcast(res, f16), lay.ab_elems) if target_form != "gfx11" else \
        kb.splat(kb.const(1.0, f16), lay.ab_elems)
    d = kb.mma(target_form, ab, ab, kb.splat(res, lay.c_elems))
    bab = kb.splat(kb.const(1.0, bf16), lay.ab_elems)
    d = kb.mma(target_form, bab, bab, d)
    res = kb.fadd(res, kb.extract(d, 0))
    kb.store(kb.gep(o, i), res, pred=ok)
    kb.atomic_add(acc, res, pred=ok)
    if packed_atomics:
        kb.atomic_add(hacc, kb.splat(kb.fpcast(res, f16), 2), pred=ok)
        kb.atomic_add(bacc, kb.splat(kb.fpcast(res, bf16), 2), pred=ok)
    return kb.finish()
