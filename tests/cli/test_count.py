"""`wgradcache count`: exact output shapes and one-line errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from wgradcache.cli import main
from wgradcache.jobs import count_table, resolve_selection


def _run(*args):
    return CliRunner().invoke(main, ["count", *args])


def test_json_shape_and_totals():
    r = _run("--json", "--target", "gfx1250", "--dtype", "fp16",
             "--variant", "async.cshuffle.atomic", "--variant", "sync.default.none")
    assert r.exit_code == 0, r.output
    # 40 and 6 of them the 3-stage ring of the 128x128 tiles (stages)
    assert json.loads(r.output) == {"total": 482, "targets": {"gfx1250": {"total": 482, "dtypes": {
        "fp16": {"total": 482, "variants": {"sync.default.none": 436,
                                            "async.cshuffle.atomic": 46}}}}}}


def test_walk_flag_gives_the_same_document():
    a = json.loads(_run("--json").output)
    b = json.loads(_run("--json", "--walk").output)
    assert a == b
    assert set(a["targets"]) == {"gfx1250", "gfx1201", "gfx1151", "gfx950", "gfx942", "sm_90"}


def test_list_prints_every_label_once():
    r = _run("--list", "--target", "gfx1201", "--dtype", "bf16", "--variant",
             "sync.cshuffle.atomic")
    labels = r.output.splitlines()
    doc = count_table(resolve_selection(["gfx1201"], ["bf16"], ["sync.cshuffle.atomic"]))
    assert len(labels) == len(set(labels)) == doc["total"] == 20  # 10 cover geometries
    assert all(lab.endswith("-sync-cshuffle-atomic") for lab in labels)


@pytest.mark.parametrize("args, msg", [
    (("--target", "gfx900"), "error: --target: unknown target 'gfx900'; valid: gfx1250, "
                             "gfx1201, gfx1151, gfx950, gfx942, sm_90\n"),
    (("--dtype", "fp8"), "error: --dtype: unknown dtype 'fp8'; valid: fp16, bf16, fp16_f32, "
                         "bf16_f32\n"),
    (("--variant", "async"), "error: --variant: unknown variant 'async'; valid: " + ", ".join(
        f"{k}.{e}.{r}" for k in ("sync", "async") for e in ("default", "cshuffle")
        for r in ("none", "atomic", "two_stage")) + ", depthwise.default.none, "
     "depthwise.default.atomic, depthwise.default.two_stage, small_c.default.none, "
     "small_c.default.atomic\n"),
])
def test_unknown_names_are_one_line_exit_2(args, msg):
    r = _run(*args)
    assert r.exit_code == 2
    assert r.output == msg


def test_table_lists_totals():
    r = _run("--target", "gfx1151")
    assert r.exit_code == 0
    assert "jobs (closed form): 282 in all" in r.output  # 14 of them depthwise, 4 small-C


@pytest.mark.parametrize("command", [
    ["count"], ["build"], ["verify", "--from-cache"], ["gc"], ["ls"],
    ["select", "--problem", "1,8,8,8,8,3,3"],
])
def test_every_command_checks_a_target_the_same_way(command, tmp_path):
    """One check: `gc --target gfx900` was a KeyError traceback, the others said it three
    ways; nothing is created for a bad target."""
    r = CliRunner().invoke(main, command + ["--target", "gfx900"]
                           + (["--cache-dir", str(tmp_path / "c")] if command[0] != "count"
                              else []))
    assert r.exit_code == 2
    assert r.output == ("error: --target: unknown target 'gfx900'; valid: gfx1250, gfx1201, "
                        "gfx1151, gfx950, gfx942, sm_90\n")
    assert not (tmp_path / "c").exists()


def test_build_names_a_target_without_kernels(monkeypatch):
    import dataclasses

    from wgradcache.model import targets

    monkeypatch.setitem(targets.TARGETS, "gfx942",
                        dataclasses.replace(targets.TARGETS["gfx942"], has_kernels=False))
    r = CliRunner().invoke(main, ["build", "--target", "gfx942"])
    assert r.exit_code == 2
    assert r.output == "error: --target: gfx942: no kernel generator for mfma targets yet\n"
