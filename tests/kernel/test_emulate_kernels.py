"""Whole kernels in the emulator: WMMA tiles vs float64, hazard detectors, atomics, control."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_samples import MFMA_FORMS, WMMA_FORMS, every_op, gemm_tile

from wgradcache.kernel import mma
from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.emulate import EmulationError, bf16_to_f32, emulate, f32_to_bf16
from wgradcache.kernel.ir import bf16, f16, f32, i32, ptr


def gemm_inputs(dt, M, K, seed=0):
    rng = np.random.default_rng(seed)
    a32 = rng.standard_normal((M, K)).astype(np.float32)
    b32 = rng.standard_normal((K, 16)).astype(np.float32)
    if dt == bf16:
        a, b = f32_to_bf16(a32), f32_to_bf16(b32)
        fa, fb = bf16_to_f32(a), bf16_to_f32(b)
    else:
        a, b = a32.astype(np.float16), b32.astype(np.float16)
        fa, fb = a.astype(np.float32), b.astype(np.float32)
    return a, b, fa.astype(np.float64) @ fb.astype(np.float64)


@pytest.mark.parametrize("form", WMMA_FORMS + MFMA_FORMS)
@pytest.mark.parametrize("dt", [f16, bf16], ids=["f16", "bf16"])
def test_wmma_gemm_tile_matches_float64(form, dt):
    kd = gemm_tile(form, dt)
    K = 4 * mma.layout(form).k
    M = 32
    a, b, ref = gemm_inputs(dt, M, K)
    d = np.zeros((M, 16), np.float32)
    rep = emulate(kd, (1, 1, 1), {"a": a, "b": b, "d": d, "k": K})
    assert rep.mma_ops == 4 and rep.barriers == 8
    # products are exact; the f64 sum rounds once to f32 per atom: |err| <= K ulp-ish
    np.testing.assert_allclose(d, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


# The MFMA lane semantics, written out from the fact sheet's formulas (mma-lane-maps.md §4a,
# §4c), independently of kernel/mma.py: (A row, k) of lane ln slot i, C/D row of slot r.
# The in-lane k order is free (§0: one permutation of k on A and B leaves D unchanged), so
# what this pins is the A row, the B column and the whole C/D map; test_mma pins the k map.
MFMA_SHEET = {
    "mfma": (16, lambda ln, i: (ln % 16, 4 * (ln // 16) + i), lambda ln, r: 4 * (ln // 16) + r),
    "mfma_k32": (32, lambda ln, i: (ln % 16, 8 * (ln // 16) + i),
                 lambda ln, r: 4 * (ln // 16) + r),
}


@pytest.mark.parametrize("form", MFMA_FORMS)
@pytest.mark.parametrize("dt", [f16, bf16], ids=["f16", "bf16"])
def test_mfma_lane_semantics_against_numpy_matmul(form, dt):
    """One MMA op on two waves of 64 lanes whose fragments come straight from global memory,
    laid out per lane by the sheet's formulas: D read back per (lane, slot) equals
    C + A @ B at the sheet's (row, col), so a wrong row, k group or C row in mma.py fails."""
    K, a_of, c_row = MFMA_SHEET[form]
    n_ab = K * 16 // 64
    rng = np.random.default_rng(3)
    A = rng.integers(-4, 5, (2, 16, K)).astype(np.float32)  # small integers: exact sums
    B = rng.integers(-4, 5, (2, K, 16)).astype(np.float32)
    C = rng.integers(-8, 9, (2, 16, 16)).astype(np.float32)
    afrag = np.zeros((128, n_ab), np.float32)
    bfrag = np.zeros((128, n_ab), np.float32)
    cfrag = np.zeros((128, 4), np.float32)
    for w in range(2):
        for lane in range(64):
            for i in range(n_ab):
                row, k = a_of(lane, i)
                afrag[64 * w + lane, i] = A[w, row, k]
                bfrag[64 * w + lane, i] = B[w, k, row]  # B: column lane % 16, same k
            for r in range(4):
                cfrag[64 * w + lane, r] = C[w, c_row(lane, r), lane % 16]
    kb = KernelBuilder(f"one_{form}", 128)
    pa, pb = kb.arg("a", ptr(dt)), kb.arg("b", ptr(dt))
    pc, pd = kb.arg("c", ptr(f32)), kb.arg("d", ptr(f32))
    t = kb.thread_id()
    fa = kb.load(kb.gep(pa, kb.mul(t, n_ab)), n_ab)
    fb = kb.load(kb.gep(pb, kb.mul(t, n_ab)), n_ab)
    fc = kb.load(kb.gep(pc, kb.mul(t, 4)), 4)
    kb.store(kb.gep(pd, kb.mul(t, 4)), kb.mma(form, fa, fb, fc))
    enc = (lambda x: f32_to_bf16(x)) if dt == bf16 else (lambda x: x.astype(np.float16))
    d = np.zeros((128, 4), np.float32)
    rep = emulate(kb.finish(), (1, 1, 1), {"a": enc(afrag), "b": enc(bfrag), "c": cfrag, "d": d})
    assert rep.mma_ops == 1
    want = C + A @ B
    for w in range(2):
        for lane in range(64):
            for r in range(4):
                assert d[64 * w + lane, r] == want[w, c_row(lane, r), lane % 16], (w, lane, r)


def test_mfma_with_part_of_a_wave_is_refused():
    """EXEC must be all ones for an MFMA: 32 lanes of a 64-lane wave are an error."""
    kb = KernelBuilder("half_wave", 64)
    c = kb.arg("c", ptr(f32))
    with kb.if_(kb.icmp("ult", kb.thread_id(), 32)):
        z = kb.const(0.0, f16.vec(8))
        kb.store(kb.gep(c, kb.mul(kb.thread_id(), 4)),
                 kb.mma("mfma_k32", z, z, kb.const(0.0, f32.vec(4))))
    with pytest.raises(EmulationError, match="runs an MMA with part of its lanes"):
        emulate(kb.finish(), (1, 1, 1), {"c": np.zeros(256, np.float32)})


def test_wmma_tile_is_exact_on_small_integers():
    """Integer inputs make every partial sum exact: any lane-map slip shows as a mismatch."""
    for form in WMMA_FORMS + MFMA_FORMS:
        kd = gemm_tile(form, f16)
        K = 64
        rng = np.random.default_rng(5)
        a = rng.integers(-3, 4, (32, K)).astype(np.float16)
        b = rng.integers(-3, 4, (K, 16)).astype(np.float16)
        d = np.zeros((32, 16), np.float32)
        emulate(kd, (1, 1, 1), {"a": a, "b": b, "d": d, "k": K})
        np.testing.assert_array_equal(d, a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.parametrize("dt", [f16, bf16], ids=["f16", "bf16"])
def test_async_gemm_tile_matches_and_counts_copies(dt):
    kd = gemm_tile("gfx1250", dt, use_async=True)
    a, b, ref = gemm_inputs(dt, 32, 64, seed=1)
    d = np.zeros((32, 16), np.float32)
    rep = emulate(kd, (1, 1, 1), {"a": a, "b": b, "d": d, "k": 64})
    assert rep.async_copies == 2 * (8 + 4)  # per K step: A 32x32x2 B / (64 lanes x 4 B) = 8
    np.testing.assert_allclose(d, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


# -- detectors fire on planted bugs ------------------------------------------------------------
WAR = r"LDS race: .* writes byte .* read by (lane \d+|several lanes) since the last barrier"


def run_tile(kd, dt=f16, K=64):
    a, b, _ = gemm_inputs(dt, 32, K)
    return emulate(kd, (1, 1, 1), {"a": a, "b": b, "d": np.zeros((32, 16), np.float32), "k": K})


def test_removed_barrier_before_mma_is_a_read_after_write_race():
    with pytest.raises(EmulationError, match=r"LDS race: lane \d+ of workgroup \(0,0,0\) reads "
                                             r"byte \d+ of 'lds_a', written by lane"):
        run_tile(gemm_tile("gfx1250", f16, barrier_before_mma=False))


def test_removed_barrier_after_mma_is_a_write_after_read_race():
    with pytest.raises(EmulationError, match=WAR):
        run_tile(gemm_tile("gfx12", f16, barrier_after_mma=False))


def test_lds_read_before_async_wait():
    with pytest.raises(EmulationError, match="async copy of lane .* in flight"):
        run_tile(gemm_tile("gfx1250", f16, use_async=True, wait_async=False))


def test_async_copy_into_bytes_read_since_barrier():
    with pytest.raises(EmulationError, match=WAR):
        run_tile(gemm_tile("gfx1250", f16, use_async=True, barrier_after_mma=False))


def test_correct_kernels_raise_nothing():
    for form in WMMA_FORMS + MFMA_FORMS:
        run_tile(gemm_tile(form, f16), K=4 * mma.layout(form).k)
    run_tile(gemm_tile("gfx1250", bf16, use_async=True), dt=bf16)


def copy_kernel(pred_guard: bool):
    kb = KernelBuilder("copy", 64)
    src, dst = kb.arg("src", ptr(f32)), kb.arg("dst", ptr(f32))
    n = kb.arg("n", i32)
    i = kb.add(kb.mul(kb.workgroup_id(0), 64), kb.thread_id())
    ok = kb.icmp("ult", i, n) if pred_guard else None
    kb.store(kb.gep(dst, i), kb.load(kb.gep(src, i), pred=ok), pred=ok)
    return kb.finish()


def test_out_of_bounds_read_names_buffer_size_and_index():
    src = np.arange(100, dtype=np.float32)
    dst = np.zeros(128, np.float32)
    with pytest.raises(EmulationError) as e:
        emulate(copy_kernel(False), (2, 1, 1), {"src": src, "dst": dst, "n": 100})
    err = e.value
    assert (err.op, err.buffer, err.size, err.index) == ("LOAD", "src", 400, 400)
    assert "byte 400 of buffer 'src' (400 bytes)" in str(err)


def test_predicated_off_access_is_no_access_and_reads_zero():
    src = np.arange(100, dtype=np.float32)
    dst = np.full(100, -1, np.float32)
    emulate(copy_kernel(True), (2, 1, 1), {"src": src, "dst": dst, "n": 100})
    np.testing.assert_array_equal(dst, src)
    # predicate false, in bounds: the load yields 0
    kb = KernelBuilder("z", 32)
    s, d = kb.arg("s", ptr(f32)), kb.arg("d", ptr(f32))
    t = kb.thread_id()
    v = kb.load(kb.gep(s, t), pred=kb.icmp("slt", t, 16))
    kb.store(kb.gep(d, t), v)
    out = np.full(32, 7, np.float32)
    emulate(kb.finish(), (1, 1, 1), {"s": np.ones(32, np.float32), "d": out})
    np.testing.assert_array_equal(out, [1] * 16 + [0] * 16)


def test_lds_out_of_bounds():
    kb = KernelBuilder("l", 32)
    buf = kb.lds("tile", 64, elem=f32)
    kb.store(kb.gep(buf, kb.thread_id()), kb.const(1.0, f32))
    with pytest.raises(EmulationError, match="64 bytes.*LDS allocation 'tile'|LDS allocation "
                                             "'tile' \\(64 bytes\\)") as e:
        emulate(kb.finish(), (1, 1, 1), {})
    assert e.value.buffer == "tile" and e.value.index == 64


def test_barrier_in_divergent_control_flow():
    kb = KernelBuilder("b", 64)
    with kb.if_(kb.icmp("ult", kb.thread_id(), 32)):
        kb.barrier()
    with pytest.raises(EmulationError, match="barrier reached by 32 of 64 lanes"):
        emulate(kb.finish(), (1, 1, 1), {})


def test_mma_needs_the_whole_wave():
    kb = KernelBuilder("m", 32)
    z = kb.const(0.0, f32.vec(8))
    a = kb.const(1.0, f16.vec(16))
    out = kb.arg("o", ptr(f32))

    def then():
        return kb.mma("gfx1250", a, a, z)
    r = kb.if_else(kb.icmp("ult", kb.thread_id(), 16), then, lambda: z)[0]
    kb.store(kb.gep(out, kb.mul(kb.thread_id(), 8)), r)
    with pytest.raises(EmulationError, match="EXEC must be all ones"):
        emulate(kb.finish(), (1, 1, 1), {"o": np.zeros(256, np.float32)})


def test_gfx11_duplicate_halves_must_agree():
    kb = KernelBuilder("m", 32)
    out = kb.arg("o", ptr(f32))
    lane = kb.thread_id()
    x = kb.sitofp(lane, f16)  # lanes 16-31 differ from 0-15
    a = kb.vec(*([x] * 16))
    r = kb.mma("gfx11", a, a, kb.const(0.0, f32.vec(8)))
    kb.store(kb.gep(out, kb.mul(lane, 8)), r, align=4)
    with pytest.raises(EmulationError, match="gfx11 A fragment: lanes 16-31 differ"):
        emulate(kb.finish(), (1, 1, 1), {"o": np.zeros(256, np.float32)})


# -- atomics ----------------------------------------------------------------------------------
def atomic_kernel(dt, packed: bool, block=128):
    kb = KernelBuilder("atom", block)
    out = kb.arg("out", ptr(dt))
    vals = kb.arg("vals", ptr(dt))
    t = kb.thread_id()
    if packed:
        v = kb.load(kb.gep(vals, kb.mul(t, 2)), 2, align=4)
        kb.atomic_add(out, v)
    else:
        kb.atomic_add(out, kb.load(kb.gep(vals, t)))
    return kb.finish()


def test_fp16_packed_atomic_rounds_after_every_add():
    """1.0 then 127 adds of 2^-11 (half an ulp: ties to even) stays 1.0 in fp16."""
    vals = np.zeros((128, 2), np.float16)
    vals[0] = 1.0
    vals[1:, 0] = 2.0**-11
    vals[1:, 1] = 2.0**-10  # a full ulp per add in the other half: 1 + 127 ulps
    vals[0, 1] = 1.0
    out = np.zeros(2, np.float16)
    emulate(atomic_kernel(f16, True), (1, 1, 1), {"out": out, "vals": vals})
    assert out[0] == 1.0  # an f32 accumulation would give 1.062
    assert out[1] == np.float16(1 + 127 * 2.0**-10)


def test_bf16_packed_atomic_rounds_after_every_add():
    vals = np.zeros((128, 2), np.uint16)
    vals[0] = 0x3F80  # 1.0
    vals[1:, 0] = f32_to_bf16(np.float32(2.0**-8))  # half an ulp of 1.0 in bf16
    vals[1:, 1] = f32_to_bf16(np.float32(2.0**-7))  # a full ulp
    out = np.zeros(2, np.uint16)
    emulate(atomic_kernel(bf16, True), (1, 1, 1), {"out": out, "vals": vals})
    assert bf16_to_f32(out[0]) == 1.0
    assert bf16_to_f32(out[1]) == np.float32(1 + 127 * 2.0**-7)


def test_f32_atomic_rounds_per_add_in_lane_order_across_workgroups():
    vals = np.full(128, 2.0**-24, np.float32)
    vals[0] = 1.0
    out = np.zeros(1, np.float32)
    emulate(atomic_kernel(f32, False), (3, 1, 1), {"out": out, "vals": vals})
    # every 2^-24 after the first 1.0 is half an ulp and ties to even: lost
    assert out[0] == 3.0


# -- control ----------------------------------------------------------------------------------
def test_loop_with_divergent_trip_counts_and_if_else_yields():
    kb = KernelBuilder("loop", 64)
    out = kb.arg("out", ptr(i32))
    t = kb.thread_id()
    stop = kb.add(kb.urem(t, 5), kb.workgroup_id(0))  # per-lane trip count

    def body(i, acc, cnt):
        odd = kb.icmp("ne", kb.and_(i, 1), 0)
        inc = kb.if_else(odd, lambda: kb.mul(i, 10), lambda: kb.const(1, i32))[0]
        return kb.add(acc, inc), kb.add(cnt, 1)

    acc, cnt = kb.loop(0, stop, 1, [kb.const(0, i32), kb.const(0, i32)], body)
    base = kb.mul(kb.add(kb.mul(kb.workgroup_id(0), 64), t), 2)
    kb.store(kb.gep(out, base), kb.vec(acc, cnt), align=8)
    got = np.zeros((3, 64, 2), np.int32)
    emulate(kb.finish(), (3, 1, 1), {"out": got}, wg_batch=2)
    for w in range(3):
        for lane in range(64):
            n = lane % 5 + w
            want = sum(10 * i if i % 2 else 1 for i in range(n))
            assert tuple(got[w, lane]) == (want, n)


def test_workgroup_ids_in_3d_grid_and_batches():
    kb = KernelBuilder("ids", 32)
    out = kb.arg("out", ptr(i32))
    x, y, z = (kb.workgroup_id(a) for a in range(3))
    lin = kb.add(x, kb.mul(4, kb.add(y, kb.mul(3, z))))
    with kb.if_(kb.icmp("eq", kb.thread_id(), 0)):
        kb.store(kb.gep(out, kb.mul(lin, 3)), kb.vec(x, y, z), align=4)
    got = np.zeros((2, 3, 4, 3), np.int32)
    rep = emulate(kb.finish(), (4, 3, 2), {"out": got}, wg_batch=5)
    assert rep.batches == 5 and rep.workgroups == 24
    zz, yy, xx = np.meshgrid(range(2), range(3), range(4), indexing="ij")
    np.testing.assert_array_equal(got, np.stack([xx, yy, zz], axis=-1))


def test_missing_argument_and_in_flight_copy_at_exit():
    kd = copy_kernel(True)
    with pytest.raises(EmulationError, match="argument 'n' not given"):
        emulate(kd, (1, 1, 1), {"src": np.zeros(1, np.float32), "dst": np.zeros(1, np.float32)})
    kb = KernelBuilder("a", 32)
    g = kb.arg("g", ptr(f32))
    buf = kb.lds("t", 128, elem=f32)
    kb.async_copy(kb.gep(g, kb.thread_id()), kb.gep(buf, kb.thread_id()), 4)
    with pytest.raises(EmulationError, match="still in flight at the end"):
        emulate(kb.finish(), (1, 1, 1), {"g": np.zeros(32, np.float32)})


@pytest.mark.parametrize("form", WMMA_FORMS + MFMA_FORMS)
def test_every_op_kernel_runs_and_its_atomics_add_in_lane_order(form):
    kd = every_op(form, async_copy=form == "gfx1250")
    B, G = kd.block_size, 2
    n = B * G - 5  # the last lanes are predicated off
    rng = np.random.default_rng(0)
    args = {"x": rng.standard_normal(B * G).astype(np.float32),
            "h": rng.standard_normal(2 * B * G).astype(np.float16),
            "o": np.zeros(B * G, np.float32), "acc": np.zeros(1, np.float32),
            "hacc": np.zeros(2, np.float16), "bacc": np.zeros(2, np.uint16), "n": n}
    rep = emulate(kd, (G, 1, 1), args)
    assert rep.mma_ops == 2 and rep.atomic_adds == 3
    assert rep.async_copies == (1 if form == "gfx1250" else 0)
    o = args["o"]
    assert np.all(o[n:] == 0) and np.all(np.isfinite(o[:n])) and np.all(o[:n] != 0)
    s = np.float32(0)
    b = np.float32(0)
    for v in o[:n]:
        s = np.float32(s + v)
        b = bf16_to_f32(f32_to_bf16(b + bf16_to_f32(f32_to_bf16(v))))
    assert args["acc"][0] == s
    np.testing.assert_array_equal(bf16_to_f32(args["bacc"]), [b, b])


def test_async_data_needs_a_barrier_after_the_wait():
    """issue -> barrier -> wait -> another lane reads: the barrier came too early."""
    def build(barrier_after_wait: bool):
        kb = KernelBuilder("a", 64)
        g, o = kb.arg("g", ptr(f32)), kb.arg("o", ptr(f32))
        buf = kb.lds("t", 256, elem=f32)
        t = kb.thread_id()
        kb.async_copy(kb.gep(g, t), kb.gep(buf, t), 4)
        kb.barrier()
        kb.async_wait(0)
        if barrier_after_wait:
            kb.barrier()
        kb.store(kb.gep(o, t), kb.load(kb.gep(buf, kb.xor(t, 1))))
        return kb.finish()

    g = np.arange(64, dtype=np.float32)
    o = np.zeros(64, np.float32)
    emulate(build(True), (1, 1, 1), {"g": g, "o": o})
    np.testing.assert_array_equal(o, g.reshape(32, 2)[:, ::-1].ravel())
    with pytest.raises(EmulationError, match="reads byte 4 of 't', written by lane 1"):
        emulate(build(False), (1, 1, 1), {"g": g, "o": o})
