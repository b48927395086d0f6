"""The grouped CTA order: the block -> tile map in the IR against Triton's GROUP_M formula,
and grouped kernels in the emulator against float64 where the order has edges (tile-row
counts not a multiple of the group, one tile-row, one tile column, split-K with an empty
last slice, groups), on every kernel family."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from wgrad_cases import check

from wgradcache.jobs.walk import walk
from wgradcache.kernel.builder import KernelBuilder
from wgradcache.kernel.emulate import emulate
from wgradcache.kernel.ir import i32, ptr
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.emulate import run_emulated
from wgradcache.wgrad.context import tile_origin


def group_m_order(tiles_m: int, tiles_n: int, group: int) -> list[tuple[int, int]]:
    """(tile_m, tile_n) of each dispatch index, written out from Triton's matmul tutorial
    (``GROUP_SIZE_M``), independently of the generator."""
    out = []
    for pid in range(tiles_m * tiles_n):
        in_group = group * tiles_n
        first = pid // in_group * group
        size = min(tiles_m - first, group)
        out.append((first + pid % in_group % size, pid % in_group // size))
    return out


def _map_kernel(tile_m: int, tile_n: int, group: int):
    kb = KernelBuilder("order", 32)
    out = kb.arg("out", ptr(i32))
    wg_m, wg_n, tiles_n = kb.arg("wg_M", i32), kb.arg("wg_N", i32), kb.arg("tiles_n", i32)
    m0, n0 = tile_origin(kb, tile_m, tile_n, group, wg_m, wg_n)
    pid = kb.add(kb.mul(kb.workgroup_id(1), tiles_n), kb.workgroup_id(0))
    with kb.if_(kb.icmp("eq", kb.thread_id(), 0)):
        kb.store(kb.gep(out, kb.mul(pid, 2)), kb.vec(kb.udiv(m0, tile_m),
                                                     kb.udiv(n0, tile_n)), align=4)
    return kb.finish()


@pytest.mark.parametrize("group", (1, 2, 4, 8))
@pytest.mark.parametrize("tiles", [(5, 3), (1, 4), (8, 2), (9, 1), (16, 5), (3, 7)])
def test_block_to_tile_map_is_triton_group_m_and_a_permutation(group, tiles):
    """Partial tiles too: wg_M and wg_N one element past a whole tile count."""
    tm, tn = tiles
    got = np.full((tm * tn, 2), -1, np.int32)
    emulate(_map_kernel(32, 64, group), (tn, tm, 1),
            {"out": got, "wg_M": 32 * (tm - 1) + 1, "wg_N": 64 * (tn - 1) + 1, "tiles_n": tn})
    want = group_m_order(tm, tn, group)
    assert [tuple(r) for r in got.tolist()] == want
    assert sorted(want) == [(m, n) for m in range(tm) for n in range(tn)]
    if group == 1:  # row-major: dispatch index = blockIdx.y * tiles_n + blockIdx.x
        assert want == [(p // tn, p % tn) for p in range(tm * tn)]


# wg_M 136 (5 tile-rows of 32, the last partial), wg_N 72 (3 columns), wg_K 162 (6 tiles of
# 32): split 7 leaves the last slice empty, 3 and 2 end on a partial tile; 3x3 pad 1
FIVE_BY_THREE = ConvProblem.parse("2,8,9,9,136,3,3,1,1")
ONE_ROW = ConvProblem.parse("2,8,9,9,24,3,3,1,1")  # wg_M 24: one tile-row, 3 columns
ONE_COLUMN = ConvProblem.parse("2,24,6,6,200,1,1")  # wg_N 24: 7 tile-rows, one column
GROUPS = ConvProblem.parse("2,16,9,9,80,3,3,1,1,1,2")  # kpg 40, cpg 8 per group: 2x3 tiles


def _spec(target: str, group: int, **kw) -> KernelSpec:
    base = dict(target=target, dtype="fp16", dw_dtype="fp16", tile_m=32, tile_n=32,
                tile_k=32, warp_m=1, warp_n=1, vec_a=8, vec_b=8, cta_group=group)
    return KernelSpec(**{**base, **kw})


def _run(spec: KernelSpec, p: ConvProblem, degree: int | None = None):
    r = run_emulated(spec, p, split_k=degree, seed=spec.cta_group + (degree or 0))
    check(r, spec.dw_dtype)
    return r


@pytest.mark.parametrize("target", ("gfx1250", "sm_90"))
@pytest.mark.parametrize("degree", (1, 2, 3, 7))
def test_grouped_split_k_at_every_degree(target, degree):
    """Every (tile, slice) once: a tile computed twice adds its partial twice."""
    r = _run(_spec(target, 4, reduction="atomic"), FIVE_BY_THREE, degree)
    assert r.plan.grid == (3, 5, degree)
    assert r.plan.slice_k == {1: 192, 2: 96, 3: 64, 7: 32}[degree]
    assert -(-162 // r.plan.slice_k) == min(degree, 6)  # degree 7: the last slice is empty


@pytest.mark.parametrize("target", ("gfx1250", "gfx1201", "gfx1151", "gfx942", "gfx950",
                                    "sm_90"))
@pytest.mark.parametrize("group, name", [(4, "five_by_three"), (8, "one_row"),
                                         (2, "one_column")])
def test_grouped_unsplit_every_target(target, group, name):
    """dW starts as NaN: a tile no CTA computes fails the comparison."""
    p = {"five_by_three": FIVE_BY_THREE, "one_row": ONE_ROW, "one_column": ONE_COLUMN}[name]
    _run(_spec(target, group), p)


@pytest.mark.parametrize("target", ("gfx1250", "sm_90"))
def test_grouped_with_conv_groups_and_split(target):
    """z = group x degree + slice is the same in every order."""
    r = _run(_spec(target, 8, reduction="atomic"), GROUPS, 3)
    assert r.plan.grid == (3, 2, 6)


@pytest.mark.parametrize("target, kw", [
    ("gfx1250", dict(k_loop="async", vec_a=0, vec_b=0, chunk_a=16, chunk_b=16,
                     epilogue="cshuffle", reduction="atomic")),
    ("sm_90", dict(k_loop="async", vec_a=0, vec_b=0, chunk_a=16, chunk_b=16)),
    ("gfx1250", dict(epilogue="cshuffle")),
    ("gfx1250", dict(reduction="two_stage", ws_replicas=2)),
])
def test_grouped_other_variants(target, kw):
    _run(_spec(target, 4, **kw), FIVE_BY_THREE, 3 if kw.get("reduction") else None)
@pytest.mark.parametrize("target", ("sm_90",))
def test_a_walked_grouped_kernel(target):
    """A grouped kernel of the shipped walk (128-wide, G 8; cta_orders names sm_90 only) on
    2 x 2 partial tiles."""
    spec = next(s for s in walk(target, ["fp16"]) if s.cta_group == 8
                and s.geometry == (128, 128, 32, 2, 4) and s.variant == "sync.default.atomic"
                and (s.vec_a, s.vec_b) == (8, 8))
    r = _run(spec, ConvProblem.parse("2,16,4,4,200,3,3,1,1"), 2)
    assert r.plan.grid == (2, 2, 2)
    row_major = dataclasses.replace(spec, cta_group=1)
    assert row_major.label() + "-g8" == spec.label()


# sha256 of each kernel's IR before the CTA order existed (benchmarks/ir_keys.py's sample);
# the arguments' ``noundef`` came later, and is all that changed since, but for sm_90's
# A fragments read in the MMA's register order (mma.TransposedRead.a_bits, 2026-12-08:
# the hash of that IR, the row-major order still without the tile map)
BEFORE = {
    "gfx1250-fp16-t128x128x32-w4x1-v8x8-sync-default-atomic":
        "c2df0705e50c7be21f5a9489153230f6e824fcb57e7a0b9cbfbe8b6a1387a027",
    "sm_90-bf16-t128x128x32-w2x4-v8x8-sync-default-none":
        "5a1ccd986e594f4e734113faa6266d0933eb6357dc762f153ca4e841e8725408",
}


@pytest.mark.parametrize("label", sorted(BEFORE))
def test_row_major_ir_is_unchanged_and_the_grouped_twin_adds_the_tile_map(label):
    """AMDGPU and NVPTX from the same IR: the grouped twin's map is one more udiv (the last
    group's rows) and the umin that sizes that group, nothing else of its kind."""
    import hashlib

    from wgradcache.model.spec import from_label
    from wgradcache.wgrad.emit import emit_ir

    spec = from_label(label)
    text = emit_ir(spec).ir_text
    define = next(ln for ln in text.splitlines() if ln.startswith("define "))
    assert text.count(" noundef ") == define.count(" noundef ") == define.count(' %"')
    before = text.replace(" noundef ", " ")
    assert hashlib.sha256(before.encode()).hexdigest() == BEFORE[label]
    grouped = emit_ir(dataclasses.replace(spec, cta_group=8)).ir_text
    for op, more in (("udiv i32", 1), ("urem i32", 0), ('call i32 @"llvm.umin.i32"', 1)):
        assert grouped.count(op) == text.count(op) + more, op
