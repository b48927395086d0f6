"""verify --level numerics covers split-K: every atomic and two-stage entry runs at a policy
degree > 1 and at the explicit degrees, a wrong result at one degree fails it, and an entry
no --problem serves is "not covered" (reported, and the run is not ok), never a pass."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from click.testing import CliRunner

from wgradcache.cache.store import TargetCache
from wgradcache.cli import main
from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import from_label, is_direct
from wgradcache.pipeline.verify import (
    VerifyRequest,
    probe_problem,
    split_degrees,
    split_probe,
    verify,
)
from wgradcache.wgrad.capability import serves
from wgradcache.wgrad.split_k import MIN_SLICE_K, plan_split_k

NOWHERE = "2,3,7,7,24,3,3"  # cpg 3: no 8-wide vector or 16-byte chunk divides it
SMALL = "2,16,7,7,24,3,3,1,1"  # served by every small-cache entry; wg_K 98, 4 K tiles
ATOMIC = "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-atomic"


def _verify(small_cache, *args):
    return CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir",
                                     str(small_cache["cache"]), "--geometries",
                                     str(small_cache["geometries"]), "--level", "numerics",
                                     "--device", "emulator", *args])


def _labels(small_cache, split: bool) -> set[str]:
    cache = TargetCache(small_cache["cache"], "gfx1250")
    return {e.label for _, e in cache.iter_entries()
            if (e.identity["reduction"] != "none") == split}


def _walked_specs():
    from wgradcache.jobs import default_jobdata, walk
    from wgradcache.model.spec import DTYPE_KEYS
    from wgradcache.model.targets import TARGETS

    data = default_jobdata(None)
    for target in TARGETS:
        yield from walk(target, DTYPE_KEYS, None, data)


def test_split_probe_makes_the_policy_split_every_walked_spec():
    """Over the shipped walk (all targets, dtypes, variants): each spec serves its probe; on
    a split-K spec the policy picks 2, K ends in a partial tile, and the runs are 2, then 1, 3,
    7 and one past the K tiles, whose last slice starts past the end of K (empty)."""
    seen = {"none": 0, "atomic": 0, "two_stage": 0}
    for spec in _walked_specs():
        seen[spec.reduction] += 1
        if spec.reduction == "none":
            p = probe_problem(spec)
            assert serves(spec, p) == (True, ""), spec.label()
            assert split_degrees(spec, p) == [(1, True)]
            continue
        p = split_probe(spec)
        assert serves(spec, p) == (True, ""), spec.label()
        assert p.wg_K >= 2 * MIN_SLICE_K and p.wg_K % spec.tile_k, spec.label()
        if is_direct(spec):  # a partial channel block (grid x: K blocks; depthwise's C = K)
            assert p.K % spec.tile_n, spec.label()
        else:
            assert p.kpg % spec.tile_m, spec.label()  # a partial M tile
        k_tiles = -(-p.wg_K // spec.tile_k)
        assert split_degrees(spec, p) == [(2, True), (1, False), (3, False), (7, False),
                                          (k_tiles + 1, False)], spec.label()
        empty = plan_split_k(spec, p, split_k=k_tiles + 1)
        assert empty.slice_k * k_tiles >= p.wg_K, spec.label()
    assert min(seen.values()) > 0, seen


def test_split_degrees_keeps_only_degrees_serves_admits():
    """10000 groups: gridDim.z = groups x degree must stay within 65535, so 7 (70000) is
    left out while 2, 3 and 5 (one past 4 K tiles) run; the policy picks 1 there."""
    spec = from_label(ATOMIC)
    g = 10000
    p = ConvProblem(N=2, C=16 * g, H=7, W=7, K=24 * g, Y=3, X=3, pad=1, groups=g)
    assert not serves(spec, p, 7)[0] and serves(spec, p, 5)[0]
    assert split_degrees(spec, p) == [(1, True), (2, False), (3, False), (5, False)]


def _corrupt_stage1_at_degree_2(monkeypatch):
    """A kernel that computes wrong only when K is split in two: after stage 1 at gridDim.z
    = 2, dW[0] (atomic) or the workspace's first element (two-stage) is off by 1024."""
    from wgradcache.numerics.run import from_storage, to_storage
    from wgradcache.pipeline import emulate as emulate_mod

    real = emulate_mod.emulate

    def wrong(kernel, grid, args, **kw):
        out = real(kernel, grid, args, **kw)
        if "x_ptr" in args and grid[2] == 2:
            if args["ws_ptr"].size > 1:  # two-stage: stage 1 writes the f32 workspace
                args["ws_ptr"][0] += 1024.0
            else:  # fp16 storage, or bf16 as uint16 bit patterns
                dw = args["dw_ptr"].reshape(-1)
                dtype = "fp16" if dw.dtype == np.float16 else "bf16"
                v = from_storage(dw[:1], dtype)
                dw[0] = to_storage(v + 1024.0, dtype)[0]
        return out

    monkeypatch.setattr(emulate_mod, "emulate", wrong)


def test_a_wrong_result_at_split_2_fails_exactly_the_split_k_entries(small_cache,
                                                                     monkeypatch):
    _corrupt_stage1_at_degree_2(monkeypatch)
    rep = verify(VerifyRequest(cache_dir=str(small_cache["cache"]), level="numerics",
                               device="emulator", geometries_file=str(small_cache["geometries"])))
    split = _labels(small_cache, split=True)
    assert sorted(f.label for f in rep.failures) == sorted(split)
    for f in rep.failures:  # only the policy's degree-2 run failed, named in the reason
        assert (f.level, f.reason.count("FAIL ")) == ("numerics", 1), f.reason
        assert f.reason.startswith(f"FAIL {f.label} on 2,16,23,23,24,3,3,1,1: error "), f.reason
        assert "(split 2 (auto) x 544 K, " in f.reason, f.reason
    status = {n.label: (n.status, [(r.degree, r.passed) for r in n.runs]) for n in rep.numerics}
    for label in split:
        assert status[label] == ("failed", [(2, False), (1, True), (3, True), (7, True),
                                            (35, True)])
    for label in _labels(small_cache, split=False):
        assert status[label] == ("passed", [(1, True)])
    assert not rep.ok


def test_a_problem_no_entry_serves_is_not_covered(small_cache, tmp_path):
    """--problem that no entry serves: every entry is not covered, nothing is a pass, the
    run exits 1, and JSON, text and JUnit say "not covered"."""
    r = _verify(small_cache, "--problem", NOWHERE, "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1
    assert (doc["ok"], doc["failed"], doc["not_covered"]) == (False, 0, 18)
    assert {(n["status"], tuple(n["degrees"]), tuple(n["runs"])) for n in doc["numerics"]} == {
        ("not_covered", (), ())}
    junit = tmp_path / "v.xml"
    r = _verify(small_cache, "--problem", NOWHERE, "--junit", str(junit))
    assert r.exit_code == 1
    assert r.stdout.rstrip().splitlines()[-1] == "checked 20, failed 0, not covered 18"
    assert "verify found failures or entries no --problem covers" in r.stderr
    suite = ET.parse(junit).getroot()
    # per entry: integrity, structure, reproduce, numerics (skipped); per stage-2 kernel
    # (fp16, bf16 at R = 8): integrity, structure, reproduce
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == (
        str(18 * 4 + 2 * 3), "0", "18")
    skipped = [c for c in suite if c.find("skipped") is not None]
    assert len(skipped) == 18 and {c.find("skipped").get("message") for c in skipped} == {
        "not covered: serves none of the given problems"}


@pytest.mark.parametrize("problems", [(SMALL,), (NOWHERE, SMALL)])
def test_given_problems_run_at_the_policy_and_explicit_degrees(small_cache, problems):
    """A served --problem covers every entry (one that serves none beside it is ignored);
    split-K entries run it at the policy's 1 (98 K: too short to split) and at 2, 3, 7 and
    5 (one past its 4 K tiles)."""
    args = [a for p in problems for a in ("--problem", p)]
    r = _verify(small_cache, *args, "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, doc["failures"]
    assert (doc["ok"], doc["failed"], doc["not_covered"]) == (True, 0, 0)
    split = _labels(small_cache, split=True)
    for n in doc["numerics"]:
        runs = ([(1, True), (2, False), (3, False), (7, False), (5, False)]
                if n["label"] in split else [(1, True)])
        assert n["status"] == "passed"
        assert n["runs"] == [{"problem": SMALL, "degree": d, "policy": pol, "passed": True}
                             for d, pol in runs]
