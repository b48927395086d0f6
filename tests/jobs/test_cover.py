"""``wgradcache cover``: the greedy cover of a hand-made timings file, line for line, and
structural facts of the cover of the committed H200 run.

The expected figures below are worked out by hand from the table in ``ROWS`` (see the
comments), not copied from the command's output.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tests.conftest import small_geometries
from wgradcache.cli import main
from wgradcache.jobs.cover import compute_cover
from wgradcache.jobs.geometries import default_jobdata, default_path, load
from wgradcache.jobs.timings import load_timings

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "benchmarks" / "results" / "sm90-h200-2026-12-03" / "speed.json"

G1 = ("t64x64x32-w2x2", [64, 64, 32, 2, 2])
G2 = ("t32x32x32-w1x1", [32, 32, 32, 1, 1])
G3 = ("t128x32x32-w2x1", [128, 32, 32, 2, 1])

# (layer, dtype, geometry, reduction, ms). Best per pair and the geometries within 1.2x:
#   A fp16: G1 1.0 (a second G1 kernel at 1.3 is ignored), G2 1.1, G3 2.0 -> G1, G2
#   B fp16: G1 1.5, G2 1.0, G3 1.25                                      -> G2
#   C fp16: G1 2.0, G2 1.5, G3 1.0 (two-stage)                           -> G3
#   D bf16: G1 1.1, G2 1.0 (two-stage), G3 1.15                          -> G1, G2, G3
#   E bf16: G3 1.0 only                                                  -> G3
# G1 covers {A, D}, G2 {A, B, D}, G3 {C, D, E}. Step 1: G2 and G3 both cover 3; G2's own
# times on them sum to 3.1, G3's to 3.15: G2. Step 2: G3 covers C and E, G1 nothing new.
# Two-stage is a cover-only variant: a cache walked with a cover without G3 lacks C's 1.0.
ROWS = [
    ("A", "fp16", G1, "none", 1.0), ("A", "fp16", G1, "atomic", 1.3),
    ("A", "fp16", G2, "none", 1.1), ("A", "fp16", G3, "none", 2.0),
    ("B", "fp16", G1, "none", 1.5), ("B", "fp16", G2, "none", 1.0),
    ("B", "fp16", G3, "none", 1.25),
    ("C", "fp16", G1, "none", 2.0), ("C", "fp16", G2, "none", 1.5),
    ("C", "fp16", G3, "two_stage", 1.0),
    ("D", "bf16", G1, "none", 1.1), ("D", "bf16", G2, "two_stage", 1.0),
    ("D", "bf16", G3, "none", 1.15),
    ("E", "bf16", G3, "none", 1.0),
]
PROBLEM = "32,64,56,56,64,1,1"


def timings_doc(rows=ROWS) -> dict:
    return {"device": "test", "layers": [], "timings": [
        {"layer": layer, "problem": PROBLEM, "dtype": dt, "rank": i + 1,
         "label": f"sm_90-{dt}-{g[0]}-v8x8-sync-default-{red}"
                  + ("-wsr8" if red == "two_stage" else ""),
         "geometry": g[1], "split_k": 1, "reduction": red, "ms": ms, "tflops": 1.0}
        for i, (layer, dt, g, red, ms) in enumerate(rows)]}


def write_timings(tmp: Path, doc: dict | None = None) -> tuple[Path, Path]:
    """The timings file and a geometries file whose current cover is [G2, G1] (G3 on the
    ladder only)."""
    p = tmp / "t.json"
    p.write_text(json.dumps(timings_doc() if doc is None else doc))
    geo = small_geometries(tmp, cover=(tuple(G2[1]), tuple(G1[1])),
                           extra_ladder=(tuple(G3[1]),))
    return p, geo


def run(args: list[str]):
    r = CliRunner().invoke(main, ["cover", *args])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r


def test_the_hand_made_cover_line_for_line(tmp_path):
    t, geo = write_timings(tmp_path)
    r = run(["--timings", str(t), "--geometries", str(geo)])
    assert r.exit_code == 0, r.output
    # Per pair with the cover {G2, G3}: A 1.1 (G2), B 1.0, C 1.0 (G3), D 1.0 (G2), E 1.0:
    # 5.1 ms against 5.0 (1.02x); fp16 3.1 / 3.0, bf16 2.0 / 2.0; the worst is A, 1.1x.
    # Pairs print by (dtype, layer); a geometry is "fastest" where the cover's best is it.
    # The current cover {G2, G1}: A 1.0, B 1.0, C 1.5, D 1.0, E none measured: 3 within,
    # 4.5 / 4.0 over the 4 timed. Walked: with {G2, G3} A keeps its ladder kernel at G1
    # (1.0): 5.0 / 5.0; with {G2, G1} C loses G3's two-stage 1.0 (1.5) and E keeps its
    # ladder kernel: 5.5 / 5.0.
    assert r.output.splitlines() == [
        f"cover of sm_90 from {t}: 2 geometries keep 5 of 5 (layer, dtype) pairs within 1.2x "
        "of their best over 3 measured geometries (--size 19)",
        " 1. t32x32x32-w1x1 (in the current cover): covers 3 new (D bf16, A fp16, B fp16); "
        "within 1.2x on 3; fastest of the cover on 3 (D bf16, A fp16, B fp16)",
        " 2. t128x32x32-w2x1: covers 2 new (E bf16, C fp16); within 1.2x on 3; "
        "fastest of the cover on 2 (E bf16, C fp16)",
        "against the full ladder: 1.020x the total time (5.1000 ms vs 5.0000 ms over 5 "
        "pairs); bf16 1.000x, fp16 1.033x",
        "worst: A fp16 1.100x (t32x32x32-w1x1 1.1000 ms vs t64x64x32-w2x2 1.0000 ms)",
        "the current cover (2 sm_90 entries): 3 of 5 pairs within 1.2x, 1.125x the total "
        "time (4.5000 ms vs 4.0000 ms over 4 pairs; 1 without a cover time left out)",
        "served by a cache walked with it (every variant at the cover's geometries, "
        "sync.default.{none,atomic} at the others): this cover 1.000x (5.0000 ms vs 5.0000 "
        "ms); the current cover 1.100x (5.5000 ms vs 5.0000 ms)",
    ]


def test_size_reached_names_the_pairs_left_and_their_loss(tmp_path):
    t, geo = write_timings(tmp_path)
    r = run(["--timings", str(t), "--size", "1", "--geometries", str(geo)])
    assert r.exit_code == 0, r.output
    # Cover {G2}: A 1.1, B 1.0, C 1.5 (G2, over 1.2x), D 1.0; E has no G2 time and is left
    # out of the totals: 4.6 / 4.0 = 1.15x; fp16 3.6 / 3.0 = 1.2x; bf16 1.0 / 1.0.
    # Walked with {G2}: A 1.0 (G1's ladder kernel), B 1.0, C 1.5 (G3's is two-stage), D 1.0,
    # E 1.0 (ladder): 5.5 / 5.0.
    assert r.output.splitlines() == [
        f"cover of sm_90 from {t}: 1 geometry keeps 3 of 5 (layer, dtype) pairs within 1.2x "
        "of their best over 3 measured geometries (--size 1)",
        " 1. t32x32x32-w1x1 (in the current cover): covers 3 new (D bf16, A fp16, B fp16); "
        "within 1.2x on 3; fastest of the cover on 4 (D bf16, A fp16, B fp16, C fp16)",
        "against the full ladder: 1.150x the total time (4.6000 ms vs 4.0000 ms over 4 "
        "pairs; 1 without a cover time left out); bf16 1.000x, fp16 1.200x",
        "worst: E bf16: no cover geometry measured (best t128x32x32-w2x1 1.0000 ms)",
        "the current cover (2 sm_90 entries): 3 of 5 pairs within 1.2x, 1.125x the total "
        "time (4.5000 ms vs 4.0000 ms over 4 pairs; 1 without a cover time left out)",
        "served by a cache walked with it (every variant at the cover's geometries, "
        "sync.default.{none,atomic} at the others): this cover 1.100x (5.5000 ms vs 5.0000 "
        "ms); the current cover 1.100x (5.5000 ms vs 5.0000 ms)",
        "left uncovered at --size 1 (2 pairs):",
        "  E bf16: no cover geometry measured (best t128x32x32-w2x1 1.0000 ms)",
        "  C fp16 1.500x (t32x32x32-w1x1 1.5000 ms vs t128x32x32-w2x1 1.0000 ms)",
    ]


def test_a_tighter_factor_needs_more_geometries(tmp_path):
    # At 1.05x: G1 covers {A}, G2 {B, D}, G3 {C, E}. Step 1: G2 (sum 2.0) ties G3 (2.0)
    # on count and time; the smaller geometry, G2 = [32, ...], wins. Then G3, then G1.
    t, geo = write_timings(tmp_path)
    r = run(["--timings", str(t), "--factor", "1.05", "--json", "--geometries", str(geo)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [c["tag"] for c in doc["cover"]] == [G2[0], G3[0], G1[0]]
    assert [c["new"] for c in doc["cover"]] == [["D bf16", "B fp16"], ["E bf16", "C fp16"],
                                                ["A fp16"]]
    assert doc["uncovered"] == []
    assert doc["loss"]["ratio"] == 1.0  # every pair at its own best geometry


def test_the_written_block_is_exact_and_loads_back_through_the_geometries_loader(tmp_path):
    t, _ = write_timings(tmp_path)
    out = tmp_path / "cover.yaml"
    r = run(["--timings", str(t), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[-1] == f"wrote the cover block (2 entries) to {out}"
    assert out.read_text() == (
        "# Recomputed by `wgradcache cover` from sm_90 timings: 2 geometries\n"
        "# keep 5 of 5 (layer, dtype) pairs within 1.2x of their best over 3 measured\n"
        "# geometries; the layer set runs 1.020x the time of all of them. Paste in\n"
        "# place of the cover: section (a geometry may be listed once).\n"
        "cover:\n"
        "  - geometry: [32, 32, 32, 1, 1]\n"
        '    reason: "sm_90 measured: within 1.2x on 3 of 5 pairs, fastest of the cover on 3:'
        ' D bf16, A fp16, B fp16"\n'
        "    targets: [sm_90]\n"
        "  - geometry: [128, 32, 32, 2, 1]\n"
        '    reason: "sm_90 measured: within 1.2x on 3 of 5 pairs, fastest of the cover on 2:'
        ' E bf16, C fp16"\n'
        "    targets: [sm_90]\n")
    shipped = default_path().read_text()
    pasted = tmp_path / "geometries.yaml"
    pasted.write_text(shipped[:shipped.index("\ncover:\n")] + "\n" + out.read_text())
    jd = load(pasted)
    assert [(c.geometry, c.targets) for c in jd.cover] == [
        ((32, 32, 32, 1, 1), ("sm_90",)), ((128, 32, 32, 2, 1), ("sm_90",))]
    assert jd.cover[1].reason == ("sm_90 measured: within 1.2x on 3 of 5 pairs, fastest of "
                                  "the cover on 2: E bf16, C fp16")


def test_the_committed_h200_run(tmp_path):
    """The cover of the real run keeps every pair within the factor at each size bound it
    reaches, reasons fit the loader, and the block loads back."""
    tim = load_timings(REAL, default_jobdata())
    assert tim.target == "sm_90"
    pairs = {(r.layer, r.dtype) for r in tim.rows}
    assert len(pairs) == 46  # 23 distinct ResNet-50 layers x fp16, bf16
    for factor in (1.2, 1.1, 1.0):
        res = compute_cover(tim, 19, factor)
        assert not res.uncovered and 1 <= len(res.picks) <= 19
        assert {q for p in res.picks for q in p.new} == pairs  # each pair covered once
        for pl in res.pairs:
            assert pl.cover_ms is not None and pl.cover_ms <= factor * pl.best_ms
            mine = [r.ms for r in tim.rows
                    if (r.layer, r.dtype) == (pl.layer, pl.dtype) and r.geometry ==
                    pl.cover_geometry]
            assert pl.cover_ms == min(mine)
            assert pl.best_ms == min(r.ms for r in tim.rows
                                     if (r.layer, r.dtype) == (pl.layer, pl.dtype))
        cov, full, left = res.totals()
        assert left == 0 and full <= cov <= factor * full
        # A cache walked with the cover keeps the ladder's kernels elsewhere: never slower.
        for pl, wl in zip(res.pairs, res.walked, strict=True):
            assert (wl.layer, wl.dtype) == (pl.layer, pl.dtype)
            assert wl.best_ms == pl.best_ms <= wl.cover_ms <= pl.cover_ms
    one = compute_cover(tim, 1, 1.2)
    assert len(one.picks) == 1 and one.uncovered
    out = tmp_path / "cover.yaml"
    r = run(["--timings", str(REAL), "--out", str(out)])
    assert r.exit_code == 0, r.output
    shipped = default_path().read_text()
    pasted = tmp_path / "geometries.yaml"
    pasted.write_text(shipped[:shipped.index("\ncover:\n")] + "\n" + out.read_text())
    jd = load(pasted)
    assert [c.geometry for c in jd.cover] == [p.geometry for p in
                                             compute_cover(tim, 19, 1.2).picks]
