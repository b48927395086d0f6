"""The direct small-C kernel through LLVM (and ptxas) on each vendor's targets: code objects
with no spill and no scratch, its LDS (sm_90 past 48 KB: dynamic), its block, and the ISA
its rule asks for (no MMA, no barrier in its loop, one dY and T*T*Cc X loads per step, no
exec-mask branch, native atomics)."""

from __future__ import annotations

import pytest

from tests.compile.conftest import built_entries
from wgradcache.model.spec import dynamic_lds_bytes, lds_bytes
from wgradcache.model.targets import get_target
from wgradcache.pipeline.verify import isa_problems

LABELS = ("gfx1250-bf16-t3x16x32-w4x1-v4x3-small_c-default-atomic",
          "gfx942-fp16-dwfp32-t5x16x8-w2x1-v1x3-small_c-default-atomic",
          "gfx1151-fp16-t3x16x16-w8x1-v1x3-small_c-default-none",
          "sm_90-fp16-t3x16x16-w4x1-v2x4-small_c-default-atomic",
          "sm_90-bf16-t3x16x64-w8x1-v4x3-small_c-default-none")  # 110592 B: dynamic


@pytest.fixture(scope="module")
def entries(tmp_path_factory):
    return built_entries(tmp_path_factory.mktemp("small_c_objects"), LABELS)


def test_code_objects_hold_no_spill_and_the_isa_its_rule_asks_for(entries):
    for spec, e, co in entries:  # the questions both vendors' code objects answer
        isa, where = e["isa"], spec.label()
        static = lds_bytes(spec) - dynamic_lds_bytes(spec)
        assert co.static_lds_bytes == static, where
        assert (co.stack_bytes, co.spills) == (0, ""), where
        assert co.max_threads == spec.block_size, where
        assert co.wave_size == get_target(spec.target).wave_size, where
        assert isa["main_loop_global_loads"] == 1 + spec.tile_m ** 2 * spec.vec_b, where
        assert isa_problems(spec, isa) == [], where
    assert dynamic_lds_bytes(entries[-1][0]) == 110592


def test_structure_refuses_what_a_small_c_loop_must_not_hold(entries):
    spec, e, _ = entries[0]
    isa = e["isa"]
    planted = {"mma": 4, "main_loop_barriers": 1, "main_loop_global_loads": 10,
               "main_loop_exec_branches": 1, "global_atomics": 0,
               "global_atomic_pk_add_bf16": 0}
    assert isa_problems(spec, {**isa, **planted}) == [
        "4 MMA instructions in a small-C kernel",
        "small-C loop takes 1 barriers per step, not 0",
        "10 global loads per small-C step, its 3x3 taps of 3 channels make 28",
        "small_c loop branches on the exec mask (predicated loads, copies or stores)",
        "16-bit split-K without global_atomic_pk_add_bf16"]
