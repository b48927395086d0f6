"""Sync K loop, default epilogue, no split: the problem matrix on every WMMA target, both
16-bit dtypes (+ fp32 dW), every ladder geometry and every vec pair, in the emulator."""

from __future__ import annotations

import pytest
from wgrad_cases import (
    AB_DTYPES,
    EDGE,
    PROBLEMS,
    TARGETS,
    check,
    geometry_for,
    make_spec,
    shipped_limits,
    widest_vec,
)

from wgradcache.jobs.walk import walk
from wgradcache.model.spec import LoadWidths, Tile, lds_bytes, loads_fit
from wgradcache.model.targets import get_target
from wgradcache.pipeline.emulate import cached_kernel, run_emulated


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", AB_DTYPES)
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_problem_matrix(target, dtype, name):
    p = PROBLEMS[name]
    i = sorted(PROBLEMS).index(name) + TARGETS.index(target) + AB_DTYPES.index(dtype)
    geometry = geometry_for(target, dtype, i)
    spec = make_spec(target, dtype, geometry, p)
    check(run_emulated(spec, p, seed=i), dtype)


@pytest.mark.parametrize("target, dtype, name", [
    ("gfx1250", "fp16", "3x3s2"), ("gfx1250", "bf16", "stem"), ("gfx1201", "fp16", "groups2"),
    ("gfx1201", "bf16", "oddK"), ("gfx1151", "fp16", "dil2"), ("gfx1151", "bf16", "partialMN")])
def test_fp32_dw(target, dtype, name):
    p = PROBLEMS[name]
    spec = make_spec(target, dtype, (64, 64, 32, 2, 2), p, dw="fp32")
    check(run_emulated(spec, p), "fp32")


def _ladder(target):
    return sorted({s.geometry for s in walk(target, ["fp16"]) if s.variant == "sync.default.none"})


def _ladder_cases():
    for t in TARGETS:
        for g in _ladder(t):
            yield pytest.param(t, g, id=f"{t}-t{g[0]}x{g[1]}x{g[2]}-w{g[3]}x{g[4]}")


@pytest.mark.parametrize("target, geometry", list(_ladder_cases()))
def test_ladder_geometries(target, geometry):
    """Every ladder geometry builds (and verifies); every one on gfx1250, the flagship, and
    every third on the others also runs with partial M/N tiles, padding and a partial K
    tile at once, with a rotating dtype and vec pair."""
    i = _ladder(target).index(geometry)
    dtype = AB_DTYPES[i % 2]
    rotation = [(8, 8), (4, 2), (2, 8), (1, 4), (8, 1)]
    # the i-th pair of the rotation that the target's load budget admits on this geometry
    vec = next(v for j in range(5) for v in [rotation[(i + j) % 5]]
               if loads_fit(Tile(get_target(target), dtype, geometry), LoadWidths("sync", *v),
                            shipped_limits(target))[0])
    spec = make_spec(target, dtype, geometry, EDGE, vec=vec)
    kd = cached_kernel(spec)
    assert kd.lds_bytes == lds_bytes(spec) and kd.block_size == spec.block_size
    if target == "gfx1250" or i % 3 == TARGETS.index(target):
        check(run_emulated(spec, EDGE, seed=i), dtype)


@pytest.mark.parametrize("target, dtype", [("gfx1250", "fp16"), ("gfx1201", "bf16"),
                                           ("gfx1151", "fp16")])
@pytest.mark.parametrize("va", (1, 2, 4, 8))
@pytest.mark.parametrize("vb", (1, 2, 4, 8))
def test_every_vec_pair(target, dtype, va, vb):
    p = PROBLEMS["groups2"]
    spec = make_spec(target, dtype, (64, 64, 32, 2, 2), p, vec=(va, vb))
    check(run_emulated(spec, p, seed=va * 10 + vb), dtype)


def test_widest_vec_follows_the_channels():
    assert widest_vec(PROBLEMS["stem"]) == (8, 1)
    assert widest_vec(PROBLEMS["1x1"]) == (8, 8)
