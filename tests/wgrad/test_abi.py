"""The one kernel argument list: layout, packing, values, range checks."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import KernelSpec
from wgradcache.wgrad.abi import (
    STAGE2_ARGS,
    WGRAD_ARGS,
    buffer_bytes,
    ir_args,
    kernarg_layout,
    kernarg_size,
    magic_u31,
    pack,
    stage2_values,
    wgrad_values,
)

SPEC = KernelSpec("gfx1250", "fp16", "fp16", 64, 64, 32, 2, 2, 8, 8, reduction="atomic")
TWO = KernelSpec("gfx1250", "bf16", "bf16", 64, 64, 32, 2, 2, 8, 8, reduction="two_stage",
                 ws_replicas=8)
PROB = ConvProblem.parse("2,6,9,9,10,3,3,2,1,1,2")


def test_names_unique_and_ordered():
    names = [a.name for a in WGRAD_ARGS]
    assert len(set(n.lower() for n in names)) == len(names)
    assert names[:4] == ["dy_ptr", "x_ptr", "dw_ptr", "ws_ptr"]
    assert names[-2:] == ["ks", "ks_count"]


def test_layout_is_naturally_aligned():
    lay = kernarg_layout(WGRAD_ARGS)
    assert lay[0] == ("dy_ptr", 0, 8) and lay[3] == ("ws_ptr", 24, 8)
    assert lay[4] == ("dy_bytes", 32, 4)
    assert lay[-1] == ("ks_count", 32 + 4 * (len(WGRAD_ARGS) - 5), 4)
    assert len(WGRAD_ARGS) == 4 + 34
    assert kernarg_size(WGRAD_ARGS) == 32 + 4 * 34 == 168
    # stage 2: two pointers then five scalars: 16 + 20 = 36 -> 40
    assert kernarg_size(STAGE2_ARGS) == 40


def test_pack_exact_bytes():
    vals = wgrad_values(PROB, SPEC, degree=3, slice_k=64,
                        pointers={"dy": 0x1000, "x": 0x2000, "dw": 0x3000})
    blob = pack(WGRAD_ARGS, vals)
    assert len(blob) == 168
    assert struct.unpack_from("<QQQQ", blob, 0) == (0x1000, 0x2000, 0x3000, 0)
    fmt = "<" + "".join("I" if a.kind == "u32" else "i" for a in WGRAD_ARGS[4:])
    ints = struct.unpack_from(fmt, blob, 32)
    b = buffer_bytes(PROB, "fp16", "fp16")
    assert ints[:4] == (b["dy"], b["x"], b["dw"], 0)
    assert ints[4:11] == (2, 9, 9, 6, 10, 3, 3)  # N H W C K Y X
    assert ints[11:13] == (PROB.Ho, PROB.Wo) == (5, 5)
    assert ints[-2:] == (64, 3)
    named = dict(zip([a.name for a in WGRAD_ARGS[4:]], ints, strict=True))
    assert named["Xcpg"] == 9 and named["HoWo"] == 25
    assert (named["mag_Wo"], named["shr_Wo"]) == magic_u31(5) == (2 ** 34 // 5 + 1, 34)


def test_buffer_bytes():
    b = buffer_bytes(PROB, "bf16", "fp32", ws_replicas=8)
    assert b == {"dy": 2 * 5 * 5 * 10 * 2, "x": 2 * 9 * 9 * 6 * 2, "dw": 10 * 9 * 3 * 4,
                 "ws": 2 * 8 * 5 * 27 * 4}
    v = wgrad_values(PROB, TWO, degree=4, slice_k=32)
    assert v["ws_bytes"] == 2 * 8 * 5 * 27 * 4 and v["ws_ptr"] == 0
    assert wgrad_values(PROB, SPEC, degree=1, slice_k=64)["ws_bytes"] == 0


def test_missing_extra_and_range_rejected():
    vals = wgrad_values(PROB, SPEC, degree=1, slice_k=64)
    with pytest.raises(ValueError, match=r"missing \['ks'\]"):
        pack(WGRAD_ARGS, {k: v for k, v in vals.items() if k != "ks"})
    with pytest.raises(ValueError, match=r"unexpected \['bogus'\]"):
        pack(WGRAD_ARGS, {**vals, "bogus": 1})
    with pytest.raises(ValueError, match="dy_bytes=4294967296 out of u32"):
        pack(WGRAD_ARGS, {**vals, "dy_bytes": 2 ** 32})
    with pytest.raises(ValueError, match="N=2147483648 out of i32"):
        pack(WGRAD_ARGS, {**vals, "N": 2 ** 31})


def test_stage2_values():
    v = stage2_values(PROB, "fp16", 8, pointers={"ws": 16, "dw": 32})
    assert v["slab_elems"] == 5 * 27 and v["total_elems"] == 2 * 5 * 27
    assert v["dw_bytes"] == 10 * 9 * 3 * 2 and v["ws_bytes"] == 2 * 8 * 5 * 27 * 4
    blob = pack(STAGE2_ARGS, v)
    assert struct.unpack_from("<QQIIiii", blob, 0) == (16, 32, v["ws_bytes"], v["dw_bytes"], 2,
                                                       135, 270)


def test_ir_args_types():
    args = ir_args(WGRAD_ARGS, "bf16", "fp32")
    assert [a.name for a in args] == [a.name for a in WGRAD_ARGS]
    assert repr(args[0].dtype.elem) == "bf16" and args[0].readonly
    assert repr(args[2].dtype.elem) == "f32" and not args[2].readonly
    assert repr(args[3].dtype.elem) == "f32"
    assert all(repr(a.dtype) == "i32" for a in args[4:])


@pytest.mark.parametrize("d", [1, 2, 3, 5, 7, 25, 49, 96, 12544, 2 ** 20 + 1, 2 ** 31 - 1])
def test_magic_division_exact_over_31_bits(d):
    m, s = magic_u31(d)
    assert 0 < m < 2 ** 32
    rng = np.random.default_rng(d)
    xs = np.concatenate([rng.integers(0, 2 ** 31, 20000, dtype=np.int64),
                         [0, 1, d - 1, d, d + 1, 2 ** 31 - 1, (2 ** 31 - 1) // d * d]])
    xs = xs[xs >= 0].astype(object)  # exact Python ints: the 63-bit product
    assert all((x * m) >> s == x // d for x in xs)
    with pytest.raises(ValueError):
        magic_u31(0)
