"""The direct depthwise kernel through LLVM (and ptxas) on each vendor's targets: code
objects with no spill and no scratch, its LDS, its block, and the ISA its rule asks for (no
MMA, no barrier in its loop, one dY and T*T X loads per step, no exec-mask branch)."""

from __future__ import annotations

import pytest

from tests.compile.conftest import built_entries
from wgradcache.model.spec import lds_bytes
from wgradcache.model.targets import get_target
from wgradcache.pipeline.verify import isa_problems

LABELS = ("gfx1250-fp16-t3x64x4-w4x1-v2x2-depthwise-default-atomic",
          "gfx942-bf16-dwfp32-t5x64x2-w2x1-v1x1-depthwise-default-atomic",
          "gfx1151-fp16-t3x32x4-w4x1-v1x1-depthwise-default-none",
          "sm_90-fp16-t7x64x2-w4x1-v1x1-depthwise-default-atomic")


@pytest.fixture(scope="module")
def entries(tmp_path_factory):
    return built_entries(tmp_path_factory.mktemp("depthwise_objects"), LABELS)


def test_code_objects_hold_no_spill_and_the_isa_its_rule_asks_for(entries):
    for spec, e, co in entries:  # the questions both vendors' code objects answer
        isa, where = e["isa"], spec.label()
        assert co.static_lds_bytes == lds_bytes(spec), where
        assert (co.stack_bytes, co.spills) == (0, ""), where
        assert co.max_threads == spec.block_size, where
        assert co.wave_size == get_target(spec.target).wave_size, where
        assert isa["main_loop_global_loads"] == 1 + spec.tile_m ** 2, where
        assert isa_problems(spec, isa) == [], where


def test_structure_refuses_what_a_depthwise_loop_must_not_hold(entries):
    spec, e, _ = entries[0]
    isa = e["isa"]
    planted = {"mma": 4, "main_loop_barriers": 1, "main_loop_global_loads": 9,
               "main_loop_exec_branches": 1}
    assert isa_problems(spec, {**isa, **planted}) == [
        "4 MMA instructions in a depthwise kernel",
        "depthwise loop takes 1 barriers per step, not 0",
        "9 global loads per depthwise step, its 3x3 taps make 10",
        "depthwise loop branches on the exec mask (predicated loads, copies or stores)"]
