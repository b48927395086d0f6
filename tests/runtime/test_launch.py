"""runtime/launch.py against the fake device: the stored code objects of the small cache,
launched with packed kernel arguments, give bit for bit the emulator run's dW; a launch
missing its zeroing or with a shifted argument layout fails."""

from __future__ import annotations

import numpy as np
import pytest

from wgradcache.cache.store import TargetCache
from wgradcache.model.spec import from_label
from wgradcache.pipeline.emulate import run_emulated
from wgradcache.pipeline.verify import probe_problem
from wgradcache.runtime import launch as launch_mod
from wgradcache.runtime.hip import HipSession, device_for
from wgradcache.runtime.launch import (
    CodeObject,
    StoredKernel,
    check_code_object,
    run_on_device,
    stage2_code,
)
from wgradcache.wgrad.abi import STAGE2_ARGS, WGRAD_ARGS, stage2_values, wgrad_values
from wgradcache.wgrad.split_k import plan_split_k
from wgradcache.wgrad.stage2 import stage2_grid, stage2_symbol

NONE = "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none"
ATOMIC = "gfx1250-bf16-t32x32x32-w1x1-c16x16-async-cshuffle-atomic"
TWO_STAGE = "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-two_stage-wsr8"


def _stored(small_cache, label):
    cache = TargetCache(small_cache["cache"], "gfx1250")
    spec = from_label(label)
    entry = cache.read_entry(spec.identity_key())
    s2 = (stage2_code(cache, spec.dw_dtype, spec.ws_replicas)
          if spec.reduction == "two_stage" else None)
    return spec, CodeObject(cache.read_blob(entry.blob), entry.symbol), s2


def _scalars(values):
    ptrs = {a.name for a in WGRAD_ARGS + STAGE2_ARGS if a.kind == "ptr"}
    return {k: v for k, v in values.items() if k not in ptrs}


@pytest.mark.parametrize("label,split", [(NONE, None), (ATOMIC, 4), (TWO_STAGE, 4)])
def test_device_run_equals_the_emulator_run(small_cache, fake_hip, label, split):
    spec, code, s2 = _stored(small_cache, label)
    p = probe_problem(spec)
    dev, _ = device_for("gfx1250")
    rep = run_on_device(dev, StoredKernel(spec, code, s2), p, split_k=split, seed=3)
    emu = run_emulated(spec, p, split_k=split, seed=3)
    assert rep.passed and emu.passed, rep.summary()
    assert (rep.plan, rep.bound, rep.error) == (emu.plan, emu.bound, emu.error)
    assert np.array_equal(rep.ref, emu.ref)
    assert rep.out.tobytes() == emu.out.tobytes()
    plan = plan_split_k(spec, p, split_k=split)
    assert plan.degree == (split or 1)
    # what the fake decoded from the kernarg bytes is what the ABI says, grid from the plan
    first = fake_hip.launches[0]
    assert (first.symbol, first.grid, first.block) == (code.symbol, plan.grid,
                                                       (spec.block_size, 1, 1))
    want = wgrad_values(p, spec, degree=plan.degree, slice_k=plan.slice_k)
    assert _scalars(first.values) == _scalars(want)
    assert all(first.values[n] for n in ("dy_ptr", "x_ptr", "dw_ptr"))
    assert (first.values["ws_ptr"] != 0) == (spec.reduction == "two_stage")
    if s2 is None:
        assert len(fake_hip.launches) == 1
    else:
        second = fake_hip.launches[1]
        s2v = stage2_values(p, spec.dw_dtype, plan.ws_replicas)
        assert second.symbol == stage2_symbol(spec.dw_dtype, spec.ws_replicas) == s2.symbol
        assert second.grid == stage2_grid(s2v["total_elems"])
        assert _scalars(second.values) == _scalars(s2v)
        assert (second.values["ws_ptr"], second.values["dw_ptr"]) == (
            first.values["ws_ptr"], first.values["dw_ptr"])
    assert fake_hip.allocations == {} and fake_hip.faults == []


def _sequence(fake, addrs):
    """The data-moving calls, buffers named by role."""
    name = {v: k for k, v in addrs.items()}
    out = []
    for ev in fake.events:
        if ev[0] in ("hipMemcpyHtoD", "hipMemcpyDtoH"):
            out.append((ev[0], name[ev[1]]))
        elif ev[0] == "hipMemset":
            out.append((ev[0], name[ev[1]], ev[2]))
        elif ev[0] == "hipModuleLaunchKernel":
            out.append((ev[0], ev[1]))
    return out


@pytest.mark.parametrize("label", [NONE, ATOMIC, TWO_STAGE])
def test_launch_order_zeroing_and_stage2_after_stage1(small_cache, fake_hip, label):
    spec, code, s2 = _stored(small_cache, label)
    run_on_device(device_for("gfx1250")[0], StoredKernel(spec, code, s2),
                  probe_problem(spec), split_k=None)
    v = fake_hip.launches[0].values
    addrs = {"dy": v["dy_ptr"], "x": v["x_ptr"], "dw": v["dw_ptr"], "ws": v["ws_ptr"]}
    head = [("hipMemcpyHtoD", "dy"), ("hipMemcpyHtoD", "x")]
    tail = [("hipMemcpyDtoH", "dw")]
    if spec.reduction == "none":
        mid = [("hipMemcpyHtoD", "dw"), ("hipModuleLaunchKernel", code.symbol)]
    elif spec.reduction == "atomic":
        mid = [("hipMemset", "dw", 0), ("hipModuleLaunchKernel", code.symbol)]
    else:
        mid = [("hipMemcpyHtoD", "dw"), ("hipMemset", "ws", 0),
               ("hipModuleLaunchKernel", code.symbol), ("hipModuleLaunchKernel", s2.symbol)]
    assert _sequence(fake_hip, addrs) == head + mid + tail


@pytest.mark.parametrize("label", [ATOMIC, TWO_STAGE])
def test_a_launch_without_zeroing_fails(small_cache, fake_hip, monkeypatch, label):
    """hipMalloc'd memory is not zero (the fake fills 0xFF = NaN): skipping the memset of dW
    (atomic) or of the workspace (two-stage) must fail the comparison."""
    spec, code, s2 = _stored(small_cache, label)
    monkeypatch.setattr(HipSession, "memset", lambda self, addr, value, n: None)
    rep = run_on_device(device_for("gfx1250")[0], StoredKernel(spec, code, s2),
                        probe_problem(spec), split_k=4)
    assert not rep.passed and rep.error == float("inf") and rep.failure == ""


def test_a_shifted_argument_layout_fails(small_cache, fake_hip, monkeypatch):
    """Scalars four bytes late (as if one argument were dropped): the fake reads every
    argument at the code object's offsets, so the launch computes garbage or faults."""
    spec, code, s2 = _stored(small_cache, ATOMIC)
    real_pack = launch_mod.pack

    def shifted(args, values):
        b = real_pack(args, values)
        return b[:32] + b[36:] + b"\0\0\0\0"

    monkeypatch.setattr(launch_mod, "pack", shifted)
    rep = run_on_device(device_for("gfx1250")[0], StoredKernel(spec, code, s2),
                        probe_problem(spec), split_k=4)
    # ks (the slice width) now reads ks_count's slot and ks_count reads 0: the kernel
    # divides by zero, which the fake reports as the GPU would, a failed launch
    assert not rep.passed and rep.out is None
    assert rep.failure == f"hipModuleLaunchKernel({code.symbol}): hipErrorLaunchFailure (719)"
    assert "division by zero" in fake_hip.faults[0]


def test_a_hip_error_is_a_failed_report_and_frees_everything(small_cache, fake_hip,
                                                             monkeypatch):
    spec, code, s2 = _stored(small_cache, NONE)
    monkeypatch.setattr(fake_hip, "hipModuleLaunchKernel",
                        lambda *a: (fake_hip.hipError_t.hipErrorLaunchFailure,))
    rep = run_on_device(device_for("gfx1250")[0], StoredKernel(spec, code, s2),
                        probe_problem(spec))
    assert (rep.passed, rep.out, rep.error) == (False, None, float("inf"))
    assert rep.failure == f"hipModuleLaunchKernel({code.symbol}): hipErrorLaunchFailure (719)"
    assert fake_hip.allocations == {}


def test_code_objects_that_do_not_match_are_refused(small_cache, fake_hip):
    spec, code, s2 = _stored(small_cache, TWO_STAGE)
    dev = device_for("gfx1250")[0]
    with pytest.raises(ValueError, match=f"code object's kernel is {code.symbol}, not x"):
        run_on_device(dev, StoredKernel(spec, CodeObject(code.hsaco, "x"), s2), probe_problem(spec))
    with pytest.raises(ValueError, match="explicit kernel arguments differ from the ABI"):
        check_code_object(code, "gfx1250", STAGE2_ARGS, 256)
    with pytest.raises(ValueError, match="needs the stage-2 kernel"):
        run_on_device(dev, StoredKernel(spec, code, None), probe_problem(spec))
    assert fake_hip.launches == []

