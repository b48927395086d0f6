"""Small kernels shared by the emulator and lowering tests (built with the public builder)."""

from __future__ import annotations

from wgradcache.kernel import mma
from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.ir import KernelDef, f32, i32, ptr

WMMA_FORMS = ("gfx1250", "gfx12", "gfx11")
FORM_TARGET = {"gfx1250": "gfx1250", "gfx12": "gfx1201", "gfx11": "gfx1151"}


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
