"""The device run's planted kernel (benchmarks/device_plant.py) is a real off-by-one: the
emulator, under the same error model the device run uses, fails it on the verify probe and
passes the honest kernel of the same spec on the same problem."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from wgrad_cases import check, make_spec

import wgradcache.pipeline.emulate as pe
from wgradcache.pipeline.emulate import run_emulated
from wgradcache.pipeline.verify_numerics import probe_problem

_PLANT = Path(__file__).resolve().parents[2] / "benchmarks" / "device_plant.py"


def _planted_kernel():
    spec = importlib.util.spec_from_file_location("device_plant", _PLANT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.planted_kernel


def test_planted_reduction_bound_is_caught_and_the_honest_kernel_passes(monkeypatch):
    spec = make_spec("sm_90", "fp16", (64, 64, 32, 2, 2), vec=(1, 1))
    problem = probe_problem(spec)
    check(run_emulated(spec, problem), "fp16")
    monkeypatch.setattr(pe, "cached_kernel", _planted_kernel())
    r = run_emulated(spec, problem)
    assert not r.hazards, r.hazards
    assert r.error > 10 * r.bound.bound, r.summary()
