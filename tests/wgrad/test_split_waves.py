"""sm_90's split rule ("waves", model/devices.py): the degree of the fewest K-tile steps per
SM over rounds of resident CTAs, with the residency from the code object's record; the AMD
targets keep upstream's fill rule."""

from __future__ import annotations

import pytest

from wgradcache.model.backends import backend_of
from wgradcache.model.devices import DEVICE_SIZES, SPLIT_RULES
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import from_label
from wgradcache.wgrad.split_k import RESIDENT_CTAS, plan_split_k, wave_degree

W4X1 = "sm_90-fp16-t128x128x32-w4x1-v8x8-sync-default-atomic"
W4X2 = "sm_90-fp16-t128x256x32-w4x2-v8x8-sync-default-atomic"


def test_every_target_names_a_rule_and_only_sm_90_takes_waves():
    assert {t: s.split for t, s in DEVICE_SIZES.items()} == {
        "gfx1250": "fill", "gfx1201": "fill", "gfx1151": "fill", "gfx950": "fill",
        "gfx942": "fill", "sm_90": "waves"}
    assert all(s.split in SPLIT_RULES for s in DEVICE_SIZES.values())
    assert all((s.cu_limits is not None) == (s.split == "waves") for s in DEVICE_SIZES.values())


@pytest.mark.parametrize("base, k_tiles, cap, slots, degree", [
    (36, 196, 12, 264, 7),     # ResNet-50 l3.conv2, 128x128: 252 CTAs, one round of 28 tiles
    (16, 196, 12, 132, 8),     # l4.conv1.first, 128x256 at one CTA an SM: 128 CTAs
    (144, 49, 3, 264, 3),      # l4.conv2: 432 CTAs in 2 rounds of 17 (1: 1 of 49, 2: 2 of 25)
    (4, 784, 49, 132, 33),     # l2.downsample, 128x256: 132 CTAs, not 49's 196 (2 rounds)
    (16, 3136, 97, 264, 33),   # 33, 49 and 66 tie at 192 tiles an SM: the smallest
    (1, 10, 128, 264, 10),     # a degree past the K tiles never pays: the cap holds it
    (1056, 64, 8, 264, 1),     # 4 full rounds already: a split only ties (2, 4) or adds
])
def test_wave_degree_takes_the_fewest_steps_per_cu(base, k_tiles, cap, slots, degree):
    assert wave_degree(base, k_tiles, cap, slots) == degree


def _record(regs: int, static: int, threads: int, dynamic: int = 0) -> dict:
    return {"registers": regs, "static_shared_bytes": static, "dynamic_shared_bytes": dynamic,
            "max_threads_per_block": threads}


@pytest.mark.parametrize("co, ctas", [
    (_record(236, 34816, 128), 2),    # 7680 registers a warp x 4 warps: 2 in 64 K
    (_record(222, 66560, 256), 1),    # 7168 x 8 warps = 57344: one
    (_record(128, 24576, 128), 4),    # 4096 x 4 = 16384: 4 (shared 25.6 KB allows 9)
    (_record(32, 0, 64), 32),         # the block cap (threads allow 32, registers 64)
    (_record(40, 0, 1024), 1),        # 2048 threads an SM: 2 of 1024 would fit, 1280 regs x 32
    (_record(64, 100000, 128), 2),    # shared memory: 2 x (100000 + 1024) of 228 KB
    (_record(64, 50000, 128, dynamic=60000), 2),  # the dynamic bytes count too
    (_record(255, 0, 1024), 1),       # over the register file: still one (it launched)
])
def test_resident_ctas_is_the_occupancy_calculators(co, ctas):
    assert backend_of("sm_90").resident_ctas(co, "sm_90") == ctas


@pytest.mark.parametrize("co", [
    {}, {"registers": 64}, _record(True, 0, 128), _record("64", 0, 128),
    _record(-1, 0, 128), _record(64, 0, 0), {**_record(64, 0, 128), "registers": None},
])
def test_a_record_without_the_facts_has_no_residency(co):
    assert backend_of("sm_90").resident_ctas(co, "sm_90") is None


def test_the_amd_backend_models_no_residency():
    assert backend_of("gfx1250").resident_ctas(_record(64, 0, 128), "gfx1250") is None


def test_the_policy_takes_the_code_objects_residency():
    """l3.downsample (32,512,28,28,1024,1,1,2) on the 128x256 tile: 16 tiles, 196 K tiles,
    cap 12 (slices of 512). One resident CTA an SM: 8 slices, 128 CTAs in one round (the
    H100 sweep's best, 0.036 ms; the fill rule's 12 took 0.047); the model's default 2: 12,
    192 CTAs in one round of 264."""
    p = ConvProblem.parse("32,512,28,28,1024,1,1,2")
    spec = from_label(W4X2)
    assert plan_split_k(spec, p, resident_ctas=1).degree == 8
    assert RESIDENT_CTAS == 2
    assert plan_split_k(spec, p).degree == plan_split_k(spec, p, resident_ctas=2).degree == 12
    # an explicit degree is kept whatever the residency
    assert plan_split_k(spec, p, split_k=5, resident_ctas=1).degree == 5


def test_amd_targets_fill_whatever_the_residency():
    p = ConvProblem.parse("32,512,28,28,1024,1,1,2")
    spec = from_label(W4X1.replace("sm_90", "gfx1250").replace("-v8x8-", "-v8x8-"))
    assert plan_split_k(spec, p, resident_ctas=1) == plan_split_k(spec, p, resident_ctas=8)
