"""benchmarks/isa_quality.py reads an sm_90 cache: the SASS main-loop rows its reader
counts, per target, all and wide (before, ``--targets sm_90`` printed nothing, exit 0);
a cache with no main-loop figures is refused in one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner

from tests.conftest import small_geometries
from wgradcache.cli import main

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _isa_quality():
    sys.path.insert(0, str(BENCH))
    try:
        import isa_quality
    finally:
        sys.path.remove(str(BENCH))
    return isa_quality


def test_sm90_cache_prints_sass_rows(tmp_path, capsys):
    geo = small_geometries(tmp_path)
    cache = tmp_path / "cache"
    r = CliRunner().invoke(main, ["build", "--target", "sm_90", "--dtype", "fp16", "--variant",
                                  "sync.default.none", "--variant", "async.default.none",
                                  "--geometries", str(geo), "--cache-dir", str(cache)])
    assert r.exit_code == 0, r.output
    iq = _isa_quality()
    assert iq.main(["--targets", "sm_90", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    rows = [ln.split("  ")[1].strip() for ln in out.splitlines()[2:] if ln.startswith("  ")]
    assert out.splitlines()[1] == "sm_90  (min median max)"
    per = ["instr/loop", "MMA/loop", "loads/loop", "instr/MMA", "essential instr/MMA",
           "loads/MMA", "LDS reads/MMA", "barriers/iter"]
    assert [r.split(" ", 1)[1] if " " in r else r for r in rows] == (
        ["n", *per, "n", *per])
    # the figures are the entries' own: instructions per MMA of the one sync kernel
    docs = iq.from_cache(str(cache), ["sm_90"])
    isa = {d["label"]: d["isa"] for d in docs}
    sync = isa["sm_90-fp16-t32x32x32-w1x1-v8x8-sync-default-none"]
    table = iq.summary([d for d in docs if "-sync-" in d["label"]])["sm_90"]
    want = sync["main_loop_instructions"] / sync["main_loop_mma"]
    assert table["all instr/MMA"] == f"{want:6.1f} {want:6.1f} {want:6.1f}"


def test_cache_without_main_loops_is_refused(tmp_path, capsys):
    geo = small_geometries(tmp_path)
    cache = tmp_path / "cache"
    r = CliRunner().invoke(main, ["build", "--target", "sm_90", "--dtype", "fp16", "--variant",
                                  "sync.default.none", "--geometries", str(geo),
                                  "--cache-dir", str(cache)])
    assert r.exit_code == 0, r.output
    iq = _isa_quality()
    assert iq.main(["--targets", "gfx1250", "--cache-dir", str(cache)]) == 1
    assert capsys.readouterr().err == f"{cache}: no entries of gfx1250\n"
    for f in (cache / "sm_90" / "entries").glob("*.json"):  # a loop with no MMA found
        doc = json.loads(f.read_text())
        doc["isa"]["main_loop_mma"] = 0
        f.write_text(json.dumps(doc))
    assert iq.main(["--targets", "sm_90", "--cache-dir", str(cache)]) == 1
    assert capsys.readouterr().err == (
        f"{cache}: no entry of sm_90 has a main loop with MMAs (entries built before "
        "main-loop figures were recorded?)\n")
