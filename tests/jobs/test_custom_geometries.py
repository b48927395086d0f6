"""A custom geometries file decides every command alike: count, build, select, emulate and
compile check a spec against the budgets of the file they were given, never the shipped one.

The custom file is the shipped one minus gfx1151's accumulator override (32 -> the base 64):
before, ``count`` walked it while ``validate`` silently read the shipped file's budgets and
build rejected the jobs count promised.
"""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from wgradcache.cli import main
from wgradcache.jobs import default_jobdata, walk
from wgradcache.jobs.geometries import default_path
from wgradcache.model.spec import accumulators_per_lane, from_label, validate

# 64 accumulators per lane: inside the custom file's budget, over the shipped gfx1151 one
OVER = "gfx1151-fp16-t32x64x32-w1x1-v8x8-sync-default-none"
PROBLEM = "1,16,6,6,16,3,3,1,1"  # kpg 16, cpg 16: vec 8 divides both


@pytest.fixture(scope="module")
def custom(tmp_path_factory) -> str:
    doc = yaml.safe_load(default_path().read_text())
    del doc["filters"]["targets"]["gfx1151"]
    p = tmp_path_factory.mktemp("custom") / "geometries.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(p)


def _run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_the_case_is_over_the_shipped_budget_only(custom):
    spec = from_label(OVER)
    assert accumulators_per_lane(32, 64, 1, 1, 32) == 64
    assert spec in set(walk("gfx1151", ["fp16"], None, default_jobdata(custom)))
    assert spec not in set(walk("gfx1151", ["fp16"]))
    assert validate(spec, limits=default_jobdata(custom).limits_for("gfx1151")) == (True, "")
    assert not validate(spec, limits=default_jobdata().limits_for("gfx1151"))[0]


def test_count_equals_what_build_accepts(custom):
    r = _run("count", "--target", "gfx1151", "--dtype", "fp16", "--geometries", custom,
             "--json")
    assert r.exit_code == 0, r.output
    total = json.loads(r.output)["total"]
    jobs = list(walk("gfx1151", ["fp16"], None, default_jobdata(custom)))
    assert total == len(jobs) > len(list(walk("gfx1151", ["fp16"])))
    limits = default_jobdata(custom).limits_for("gfx1151")
    assert [s.label() for s in jobs if not validate(s, limits=limits)[0]] == []


def test_build_select_emulate_compile_follow_the_file(custom, tmp_path):
    cache = str(tmp_path / "cache")
    r = _run("build", "--target", "gfx1151", "--dtype", "fp16", "--variant",
             "sync.default.none", "--geometry", "t32x64x32-w1x1", "--limit", "1",
             "--geometries", custom, "--cache-dir", cache, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output.strip().splitlines()[-1])
    assert (summary["jobs"], summary["built"], summary["rejected"]) == (1, 1, 0)

    for source in (("--from-walk",), ("--cache-dir", cache)):
        r = _run("select", "--target", "gfx1151", "--problem", PROBLEM, "--dtype", "fp16",
                 "--geometries", custom, "--json", *source)
        assert r.exit_code == 0, r.output
        assert OVER in [c["label"] for c in json.loads(r.output)["candidates"]], source

    r = _run("emulate", OVER, "--problem", PROBLEM, "--geometries", custom, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["passed"] is True

    out = tmp_path / "out"
    r = _run("compile", OVER, "--out", str(out), "--geometries", custom, "--json")
    assert r.exit_code == 0, r.output
    assert (out / f"{OVER}.hsaco").stat().st_size > 0
    # the shipped file's budget still refuses it, with the reason
    r = _run("compile", OVER, "--out", str(out))
    assert r.exit_code == 2 and "64 accumulator registers per lane exceed the budget 32" \
        in r.output
