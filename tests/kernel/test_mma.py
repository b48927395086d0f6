"""Lane maps: bijections onto their index sets, and the rows of mma-lane-maps.md."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from wgradcache.kernel import mma
from wgradcache.model.targets import TARGETS


@pytest.mark.parametrize("form", sorted(mma.LAYOUTS))
def test_maps_cover_each_index_exactly_once_or_twice(form):
    lay = mma.layout(form)
    copies = 2 if form == "gfx11" else 1
    a = Counter(tuple(int(x) for x in lay.a_map(lane, i))
                for lane in range(lay.wave_size) for i in range(lay.ab_elems))
    b = Counter(tuple(int(x) for x in lay.b_map(lane, i))
                for lane in range(lay.wave_size) for i in range(lay.ab_elems))
    c = Counter(tuple(int(x) for x in lay.c_map(lane, r))
                for lane in range(lay.wave_size) for r in range(lay.c_elems))
    assert a == {(r, k): copies for r in range(lay.m) for k in range(lay.k)}
    assert b == {(k, n): copies for k in range(lay.k) for n in range(lay.n)}
    assert c == {(r, n): 1 for r in range(lay.m) for n in range(lay.n)}
    assert lay.ab_copies == copies


def ks(form, lane):
    lay = mma.layout(form)
    return [int(lay.a_map(lane, i)[1]) for i in range(lay.ab_elems)]


def rows(form, lane):
    lay = mma.layout(form)
    return [int(lay.c_map(lane, r)[0]) for r in range(lay.c_elems)]


def test_gfx1250_k_ck_map_and_cd_rows():
    assert ks("gfx1250", 0) == [0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23]
    assert ks("gfx1250", 31) == [8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31]
    assert rows("gfx1250", 16) == list(range(8, 16))
    assert mma.layout("gfx1250").c_map(31, 0) == (8, 15)


def test_gfx12_isa_k_map():
    assert ks("gfx12", 1) == [0, 1, 2, 3, 8, 9, 10, 11]
    assert ks("gfx12", 16) == [4, 5, 6, 7, 12, 13, 14, 15]
    assert rows("gfx12", 17) == list(range(8, 16))


def test_gfx11_duplicated_lanes_and_row_interleave():
    assert ks("gfx11", 3) == ks("gfx11", 19) == list(range(16))
    assert rows("gfx11", 0) == [0, 2, 4, 6, 8, 10, 12, 14]
    assert rows("gfx11", 31) == [1, 3, 5, 7, 9, 11, 13, 15]


def test_mfma_16x16x16_groups_of_four():
    assert ks("mfma", 48) == [12, 13, 14, 15]
    assert rows("mfma", 63) == [12, 13, 14, 15]
    assert mma.layout("mfma").a_map(63, 0)[0] == 15


def test_mfma_16x16x32_eight_contiguous_k_per_lane():
    """mma-lane-maps.md §4c rows: lane 16 -> k 8..15, lane 32 -> 16..23, lane 63 -> 24..31."""
    assert ks("mfma_k32", 0) == list(range(8))
    assert ks("mfma_k32", 16) == list(range(8, 16))
    assert ks("mfma_k32", 32) == list(range(16, 24))
    assert ks("mfma_k32", 63) == list(range(24, 32))
    assert mma.layout("mfma_k32").a_map(47, 0)[0] == 15
    assert rows("mfma_k32", 33) == rows("mfma", 33) == [8, 9, 10, 11]
    assert mma.k_runs(mma.layout("mfma_k32")) == [(0, 0, 8)]
    assert mma.lds_k_order(mma.layout("mfma_k32")) == tuple(range(32))


def test_k_runs():
    assert mma.k_runs(mma.layout("gfx1250")) == [(0, 0, 8), (8, 16, 8)]
    assert mma.k_runs(mma.layout("gfx12")) == [(0, 0, 4), (4, 8, 4)]
    assert mma.k_runs(mma.layout("gfx11")) == [(0, 0, 16)]


def test_unknown_form():
    with pytest.raises(KeyError, match="unknown MMA form"):
        mma.layout("gfx90a")


@pytest.mark.parametrize("key", sorted(k for k in mma.INTRINSICS
                                        if mma.INTRINSICS[k].style != "nvvm"))
def test_intrinsic_names_spell_the_layout_operands(key):
    """The overload suffix of each WMMA name is its lane layout's C/D and A/B vectors; MFMA
    intrinsics are not overloaded (NVVM's: tests/kernel/test_mma_nvidia.py)."""
    form, elem = key
    intr, lay = mma.intrinsic(form, elem), mma.layout(form)
    is_mfma = form.startswith("mfma")
    assert intr.name.startswith(f"llvm.amdgcn.{'mfma' if is_mfma else 'wmma'}.f32.")
    assert f"{lay.m}x{lay.n}x{lay.k}" in intr.name
    if is_mfma:
        assert not re.search(r"\.v\d+", intr.name)
        assert intr.style == "mfma" and lay.wave_size == 64
    else:
        assert intr.name.endswith(f".v{lay.c_elems}f32.v{lay.ab_elems}{intr.operand}")
    real_bf16 = form in ("gfx1250", "mfma_k32")
    assert intr.operand == (elem if real_bf16 or elem == "f16" else "i16")


def test_every_layout_form_has_both_intrinsics_and_every_atom_a_layout():
    assert set(mma.INTRINSICS) == {(f, e) for f in mma.LAYOUTS for e in ("f16", "bf16")}
    assert {a.form for t in TARGETS.values() for a in t.atoms.values()} == set(mma.LAYOUTS)
    with pytest.raises(KeyError, match="no MMA intrinsic for form 'gfx12' with f32 operands"):
        mma.intrinsic("gfx12", "f32")


def test_argument_lists_per_style():
    a, b, c = ("<16 x half>", "%a"), ("<16 x half>", "%b"), ("<8 x float>", "%c")
    assert mma.intrinsic("gfx1250", "f16").args(a, b, c) == [
        ("i1", "0"), a, ("i1", "0"), b, ("i16", "0"), c, ("i1", "0"), ("i1", "0")]
    assert mma.intrinsic("gfx11", "f16").args(a, b, c) == [a, b, c]
    assert mma.intrinsic("mfma", "bf16").args(a, b, c) == [a, b, c] + [("i32", "0")] * 3


def test_intrinsic_names_live_only_in_mma_py():
    """One place for the names: the lowering and compile.samples read ``INTRINSICS``."""
    src = Path(mma.__file__).parents[1]
    naming = sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                    if re.search(r"llvm\.(amdgcn\.(wmma|mfma|swmmac)|nvvm\.mma)",
                                 p.read_text()))
    assert naming == ["kernel/mma.py"]


@pytest.mark.parametrize("form", list(mma.LAYOUTS))
def test_lds_k_order_makes_every_fragment_one_run(form):
    """Position p of a K-contiguous row holds k = order[p]: a bijection on [0, k), and each
    lane's slots of one row block, in slot order, are the consecutive positions from
    g * run (g its k group; 0 for gfx11, whose lane groups duplicate each other)."""
    lay = mma.layout(form)
    order = mma.lds_k_order(lay)
    assert sorted(order) == list(range(lay.k))
    for lane in range(lay.wave_size):
        first = lay.lane_group(lane) * lay.run if lay.k_group_stride else 0
        for b in range(len(lay.row_offsets)):
            rows, ks_ = lay.a_map(lane, np.arange(b * lay.run, (b + 1) * lay.run))
            assert len(set(rows.tolist())) == 1, (form, lane, b)
            assert [order[first + i] for i in range(lay.run)] == list(ks_), (form, lane)


def test_lds_k_order_per_form():
    assert mma.lds_k_order(mma.layout("gfx12"))[:8] == (0, 1, 2, 3, 8, 9, 10, 11)
    assert mma.lds_k_order(mma.layout("gfx1250"))[8:16] == tuple(range(16, 24))
    assert mma.lds_k_order(mma.layout("gfx11")) == tuple(range(16))
