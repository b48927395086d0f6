"""benchmarks/device_speed.py's sweep times the policy's own degree beside --sweep's, and
speed_families.py reports the policy's loss from it (an older file without it: said, no
nan)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, _BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_sweep_includes_the_policy_degree():
    sweep_set = _load("device_speed").sweep_set
    assert sweep_set("1,2,4,8,16,32,64,128", 93) == [1, 2, 4, 8, 16, 32, 64, 93, 128]
    assert sweep_set("4,1,4", 4) == [1, 4]
    assert sweep_set("", 7) == [7]


def _doc(sweep_ms: dict) -> dict:
    label = "sm_90-fp16-t128x64x32-w2x2-v8x8-sync-default-atomic"
    return {"device": "test", "timings": [
        {"layer": "net/a", "dtype": "fp16", "label": label, "ms": 1.0}],
        "layers": [{"layer": "net/a", "dtype": "fp16", "best_ms": 1.0, "flops": 1e9,
                    "cudnn_ms": 2.0, "select_ms": 1.0,
                    "sweep": {"label": label, "policy": 93, "ms": sweep_ms}}]}


def test_the_policy_loss_is_reported_from_its_swept_degree():
    lines = _load("speed_families").summarise(_doc({"64": 1.2, "93": 1.5, "128": 1.0}))
    assert lines[-3:] == [
        "split degree sweep (fp16): layer, kernel, policy, best, policy ms / best ms",
        "  net/a                            sm_90-fp16-t128x64x32-w2x2-v8x8-sync-default-"
        "atomic: x93 vs x128: 1.50",
        "  policy within 1.1x of the best degree on 0 of 1 layers; median loss 1.50x"]
    lines = _load("speed_families").summarise(_doc({"64": 1.2, "128": 1.0}))
    assert lines[-1] == ("  net/a                            sm_90-fp16-t128x64x32-w2x2-v8x8-"
                         "sync-default-atomic: x93 not timed, best x128")


def test_split_policy_holds_the_best_to_what_the_reduction_admits():
    """x128 is fastest but past the fp16 packed atomic's cap (97): the best admitted is x64;
    a layer whose policy degree was not swept is left out, not guessed."""
    rows = _load("split_policy").rows
    label = "sm_90-fp16-t64x32x64-w4x1-v8x8-sync-default-atomic"
    doc = {"layers": [
        {"layer": "net/a", "sweep": {"label": label, "policy": 93,
                                     "ms": {"32": 0.05, "64": 0.04, "93": 0.05, "128": 0.03}}},
        {"layer": "net/b", "sweep": {"label": label, "policy": 12, "ms": {"8": 0.02}}},
        {"layer": "net/c"}]}
    got = rows(doc)
    assert [(r["layer"], r["policy"], r["best"], round(r["ratio"], 6)) for r in got] == [
        ("net/a", 93, 64, 1.25)]
