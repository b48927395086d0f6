"""select: the shipped walk serves every reference layer; pruning keeps async apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from wgradcache.cli import main
from wgradcache.model.problem import ConvProblem
from wgradcache.numerics.layers import load_layers
from wgradcache.pipeline.select import CostSources, candidates_from_walk, select

LAYERS = load_layers(Path(__file__).resolve().parents[2] / "layers" / "reference.yaml")


@pytest.fixture(scope="module")
def walk_specs():
    return {d: candidates_from_walk("gfx1250", d) for d in ("fp16", "bf16")}


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_every_reference_layer_is_served_by_the_shipped_walk(walk_specs, dtype):
    assert len(LAYERS) >= 50
    names = {layer.name.split("/")[0] for layer in LAYERS}
    assert {"resnet50"} <= names
    unserved = [layer.name for layer in LAYERS
                if not select("gfx1250", layer.problem, walk_specs[dtype])]
    assert unserved == []


def test_the_layer_set_has_the_edge_layers():
    probs = [layer.problem for layer in LAYERS]
    assert any(p.C == 3 for p in probs)  # stem
    assert any(1 < p.groups < p.C for p in probs)  # grouped
    assert any(p.groups == p.C == p.K for p in probs)  # depthwise
    assert any(p.Y == p.X == 1 and (p.C % 2 or p.K % 2) for p in probs)  # 1x1, odd channels


def test_async_kernels_survive_next_to_wider_sync_kernels(walk_specs):
    # kpg 8, cpg 4: the widest sync pair that fits is (8, 1) (9 elements per load pair);
    # the async kernels copy 4-byte chunks (2 + 2 elements). Pruned together they would
    # vanish; pruned apart they stay.
    p = ConvProblem.parse("8,4,14,14,8,3,3,1,1")
    found = select("gfx1250", p, walk_specs["fp16"])
    asyncs = [c for c in found if c.spec.k_loop == "async"]
    syncs = [c for c in found if c.spec.k_loop == "sync"]
    assert asyncs and syncs
    assert {(c.spec.chunk_a, c.spec.chunk_b) for c in asyncs} == {(4, 4)}
    assert max(c.spec.load_vec_a + c.spec.load_vec_b for c in syncs) == 9
    assert max(c.spec.load_vec_a + c.spec.load_vec_b for c in asyncs) == 4
    # within a kind only the widest copy is kept
    kinds = {}
    for c in syncs:
        kinds.setdefault((c.spec.geometry, c.spec.epilogue, c.spec.reduction), set()).add(
            (c.spec.vec_a, c.spec.vec_b))
    assert all(len(v) == 1 for v in kinds.values())
    # without pruning the narrower sync copies come back
    assert len(select("gfx1250", p, walk_specs["fp16"], prune=False)) > len(found)


def test_two_stage_policy(walk_specs):
    stem = ConvProblem.parse("8,3,32,32,64,7,7,2,3")  # wg_N = 147, odd
    fp16 = select("gfx1250", stem, walk_specs["fp16"])
    assert {c.reduction for c in fp16 if c.spec.reduction != "none"} == {"two_stage"}
    assert all(c.workspace_bytes == 8 * 64 * 147 * 4 for c in fp16
               if c.reduction == "two_stage")
    even = ConvProblem.parse("8,64,16,16,64,3,3,1,1")  # wg_N = 576
    assert "two_stage" not in {c.reduction for c in select("gfx1250", even,
                                                             walk_specs["fp16"])}
    # bf16 on wave32 runs two-stage by default next to the packed atomic (upstream)
    bf16 = {c.reduction for c in select("gfx1250", even, walk_specs["bf16"])}
    assert {"two_stage", "atomic"} <= bf16


def test_cli_json_lists_candidates_in_rank_order():
    r = CliRunner().invoke(main, ["select", "--target", "gfx1250", "--problem",
                                  "32,64,56,56,64,3,3,1,1", "--from-walk", "--limit", "3",
                                  "--json"])
    assert r.exit_code == 0, r.output
    full = json.loads(r.stdout)
    assert (full["skipped_corrupt"], full["skipped"]) == (0, []) and full["served"] > 3
    doc = full["candidates"]
    assert len(doc) == 3
    assert [c["score"] for c in doc] == sorted(c["score"] for c in doc)
    assert set(doc[0]) == {"label", "key", "split_k", "slice_k", "reduction", "grid", "block",
                           "lds_bytes", "dynamic_lds_bytes", "workspace_bytes", "score",
                           "cost_from", "expected_ms", "degree_from"}
    assert {c["cost_from"] for c in doc} == {"formula"}  # the walk has no code objects
    assert {c["expected_ms"] for c in doc} == {None}  # nor timings: clocks, not ms
    assert doc[0]["grid"][2] == doc[0]["split_k"]


def test_cli_from_the_small_cache(small_cache):
    r = CliRunner().invoke(main, ["select", "--target", "gfx1250", "--problem",
                                  "2,16,7,7,24,3,3,1,1", "--cache-dir",
                                  str(small_cache["cache"]), "--json"])
    assert r.exit_code == 0, r.output
    cands = json.loads(r.stdout)["candidates"]
    labels = [c["label"] for c in cands]
    assert labels and all(lab.startswith("gfx1250-fp16-t32x32x32-w1x1") for lab in labels)
    assert {c["cost_from"] for c in cands} == {"code object"}  # each entry's own isa


def test_cli_nothing_served_and_bad_input(tmp_path):
    r = CliRunner().invoke(main, ["select", "--target", "gfx1250", "--problem",
                                  "2,16,7,7,24,3,3", "--cache-dir", str(tmp_path)])
    assert r.exit_code == 1
    assert "no cached kernel serves 2,16,7,7,24,3,3 on gfx1250" in r.output
    r = CliRunner().invoke(main, ["select", "--target", "gfx1250", "--problem", "2,16,7"])
    assert r.exit_code == 2
    assert r.output.startswith("error: --problem 2,16,7: ")


def test_table_shows_the_best_ten_and_the_count_unless_all():
    """294 rows for one ResNet layer was a wall of text: ten and how many there are."""
    args = ["select", "--target", "gfx1250", "--problem", "32,64,56,56,64,3,3,1,1",
            "--from-walk"]
    n = len(json.loads(CliRunner().invoke(main, args + ["--json"]).stdout)["candidates"])
    assert n > 10
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert f"{n} kernel(s) serve 32,64,56,56,64,3,3,1,1 on gfx1250" in r.output
    assert "the best 10 shown (--all for every one)" in r.output
    ranks = [line.split("│")[1].strip() for line in r.output.splitlines()
             if line.startswith("│")]
    assert ranks == [str(i) for i in range(1, 11)]
    r = CliRunner().invoke(main, args + ["--all"])
    ranks = [line.split("│")[1].strip() for line in r.output.splitlines()
             if line.startswith("│")]
    assert ranks == [str(i) for i in range(1, n + 1)] and "--all for" not in r.output
    r = CliRunner().invoke(main, args + ["--limit", "3"])
    assert "the best 3 shown" in r.output


def test_corrupt_entries_are_skipped_and_said_so(small_cache, tmp_path):
    """Two fp16 entries cannot be served (one not whole, one whose blob lost a byte):
    select serves the rest, exit 0, and says once how many it skipped, with the first;
    --json carries every line. With nothing left that serves, exit 1, same line. (A whole
    entry of another dtype is no candidate, so its blob is not checked.)"""
    import shutil

    from tests.hostile.test_corrupt_cache import select_skipped
    from wgradcache.cache.store import TargetCache

    root = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], root)
    c = TargetCache(root, "gfx1250")
    entries = {e.label: e for _, e in c.iter_entries()}
    fp16 = entries["gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none"]
    other = entries["gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-cshuffle-none"]
    path = c.entry_path(fp16.identity_key)
    path.write_bytes(path.read_bytes()[:-1])
    blob = c.blob_path(other.blob)
    blob.write_bytes(blob.read_bytes()[:-1])
    lines = {fp16.identity_key: f"{path}: corrupt: not whole JSON (Expecting ',' delimiter "
                                f"at char {len(path.read_bytes())})",
             other.identity_key: f"{c.entry_path(other.identity_key)}: corrupt: blob "
                                f"{other.blob[:16]} is {other.blob_size - 1} bytes, its entry "
                                f"records {other.blob_size}"}
    want = [lines[k] for k in sorted(lines)]  # the reader's order: by key
    args = ["select", "--target", "gfx1250", "--cache-dir", str(root), "--problem"]
    r = CliRunner().invoke(main, [*args, "2,16,7,7,24,3,3,1,1", "--json"])
    assert (r.exit_code, r.stderr.splitlines()) == (0, [select_skipped(want[0], 2)]), r.output
    doc = json.loads(r.stdout)
    assert (doc["skipped_corrupt"], doc["skipped"]) == (2, want)
    assert fp16.label not in [x["label"] for x in doc["candidates"]] and doc["candidates"]
    r = CliRunner().invoke(main, [*args, "2,16,7,7,24,3,3,1,1"])
    assert r.exit_code == 0 and r.stderr.splitlines() == [select_skipped(want[0], 2)]
    r = CliRunner().invoke(main, [*args, "1,1,1,1,1,1,1"])  # nothing serves K = 1
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0] == select_skipped(want[0], 2)


@pytest.mark.parametrize("damage", ["record removed", "blob removed", "blob byte flipped"])
def test_a_two_stage_entry_without_a_whole_stage2_kernel_is_skipped(small_cache, tmp_path,
                                                                     damage):
    """bf16 on wave32 wants two-stage: its entry is a candidate only while its stage-2
    reduce kernel is whole (record there, blob of the size and sha256 it records). With
    the companion damaged the entry is skipped and counted like a corrupt entry (stderr
    line, --json), and the other candidates are served in the same order."""
    import shutil

    from tests.hostile.test_corrupt_cache import select_skipped
    from wgradcache.cache.store import TargetCache

    root = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], root)
    args = ["select", "--target", "gfx1250", "--cache-dir", str(root), "--dtype", "bf16",
            "--problem", "2,16,7,7,24,3,3,1,1", "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0 and r.stderr == "", r.output
    before = [c["label"] for c in json.loads(r.stdout)["candidates"]]
    two = "gfx1250-bf16-t32x32x32-w1x1-v8x8-sync-default-two_stage-wsr8"
    assert two in before and len(before) == 9

    c = TargetCache(root, "gfx1250")
    entry = {e.label: e for _, e in c.iter_entries()}[two]
    s2 = c.read_stage2("bf16-wsr8")
    s2_path, blob = c.stage2_path("bf16-wsr8"), c.blob_path(s2.blob)
    head = f"{c.entry_path(entry.identity_key)}: stage-2 kernel bf16-wsr8"
    if damage == "record removed":
        s2_path.unlink()
        line = f"{head} is missing"
    elif damage == "blob removed":
        blob.unlink()
        line = f"{head}: {s2_path}: corrupt: blob {s2.blob[:16]} is missing"
    else:
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0x40
        blob.write_bytes(bytes(data))
        line = (f"{head}: {s2_path}: corrupt: blob {s2.blob[:16]} does not hash to the "
                "sha256 its entry records")
    r = CliRunner().invoke(main, args)
    assert (r.exit_code, r.stderr.splitlines()) == (0, [select_skipped(line)]), r.output
    doc = json.loads(r.stdout)
    assert (doc["skipped_corrupt"], doc["skipped"]) == (1, [line])
    assert [x["label"] for x in doc["candidates"]] == [lab for lab in before if lab != two]
    # fp16's two-stage entry has its own companion (fp16-wsr8): nothing of it is skipped
    r = CliRunner().invoke(main, [*args[:-5], "--problem", "2,16,7,7,24,3,3,1,1", "--json"])
    assert r.exit_code == 0 and r.stderr == "" and json.loads(r.stdout)["skipped"] == []


def _spec(label):
    from wgradcache.model.spec import from_label

    return from_label(label)


@pytest.mark.parametrize("label, slots", [
    # sm_90 16x16x16 atom, 32x32 warp tile, 2 k-steps: 2 x (4 atoms + 2 + 2 fragment reads)
    # + 8 vectors per thread x (load + LDS store) + 2 (barrier, loop branch)
    ("sm_90-fp16-t32x32x32-w1x1-v8x8-sync-default-atomic", 34),
    ("sm_90-fp16-t32x32x32-w2x2-v8x8-sync-default-atomic", 12),  # 16x16 warp tiles
    ("sm_90-fp16-t32x32x32-w1x1-v8x1-sync-default-two_stage-wsr8", 90),  # 36 vectors
    ("gfx942-fp16-t64x64x32-w2x2-v8x8-sync-default-atomic", 22),  # wave64: 2 vectors
    ("gfx1250-fp16-t64x64x32-w2x2-v8x8-sync-default-atomic", 18),  # 16x16x32: 1 k-step
])
def test_issue_slots_per_wave_and_k_tile_follow_the_targets_atom(label, slots):
    from wgradcache.pipeline.select import warp_issue_per_k_tile

    assert warp_issue_per_k_tile(_spec(label)) == slots


def test_one_wave_ctas_leave_issue_slots_idle():
    """Same grid and split (l1.conv1 of ResNet-50), ranked by the two kernels' code objects
    as built (ptxas 13: the one-wave 32x32 loop is 292 instructions a K tile, the four-wave
    16x16 one 79 a wave): two resident one-wave CTAs issue at 2 x ``ISSUE_PER_WAVE`` = 1
    instruction a clock where eight waves reach the CU's 4. Measured on the H200 (12-04,
    these kernels, bf16): w2x2 170-172 us, w2x1 184, w1x2 190, w1x1 202-213 (on the 12-03
    kernels, before ldmatrix, the one-wave tile had been 1.7x faster)."""
    from wgradcache.pipeline.select import CodeFacts

    p = ConvProblem.parse("32,256,56,56,64,1,1")
    four = _spec("sm_90-fp16-t32x32x32-w2x2-v8x8-sync-default-atomic")
    one = _spec("sm_90-fp16-t32x32x32-w1x1-v8x8-sync-default-atomic")
    facts = {four.identity_key(): CodeFacts(79, 4),
             one.identity_key(): CodeFacts(292, 16)}
    got = select("sm_90", p, [one, four], prune=False, costs=CostSources(facts))
    # the waves rule: 16 tiles x 33 = 528 CTAs, 2 rounds of 264 (ties with 49 and 66 at 192
    # K tiles a CU; the smallest wins); 2 rounds of 2 CTAs a CU x resident waves x (96 K
    # tiles x slots + epilogue scaled by code / formula: 8 x 79 / 12, 32 x 292 / 34) / issue
    # rate; the loops' LDS reads (2 x 96 x 8192 B and 2 x 96 x 4096 B over 128 B a clock)
    # take less
    assert [(c.spec.label(), c.degree, c.grid) for c in got] == [
        (four.label(), 33, (8, 2, 33)), (one.label(), 33, (8, 2, 33))]
    assert got[0].score == pytest.approx(2 * 8 * (96 * 79 + 8 * 79 / 12) / 4)
    assert got[1].score == pytest.approx(2 * 2 * (96 * 292 + 32 * 292 / 34) / 1)


def test_lds_reads_bound_small_warp_tiles():
    """Eight waves of 16x32 warp tiles (t64x64x32 w4x2) read as many LDS bytes per K tile
    as four waves of 64x32 (t128x64x32 w2x2) for half the MACs; with the code's counts
    alike per MMA, the fragment reads decide (H200 12-04: the w4x2 pick 1.3x slower on the
    28x28 and 14x14 layers)."""
    from wgradcache.pipeline.select import LDS_BYTES_PER_CLOCK, lds_read_bytes_per_k_tile

    small = _spec("sm_90-fp16-t64x64x32-w4x2-v8x8-sync-default-atomic")
    big = _spec("sm_90-fp16-t128x64x32-w2x2-c16x16-async-default-atomic")
    # 8 waves x 2 k-steps x (1 x 16 + 2 x 16 rows) x 16 k x 2 B; 4 x 2 x (4 + 2) x 16 x 16 x 2
    assert lds_read_bytes_per_k_tile(small) == 8 * 2 * 48 * 16 * 2 == 24576
    assert lds_read_bytes_per_k_tile(big) == 4 * 2 * 96 * 16 * 2 == 24576
    assert LDS_BYTES_PER_CLOCK == 128


def test_cshuffle_ranks_below_its_default_twin():
    """Same geometry, split and grid: the cshuffle epilogue's LDS round trip costs slots
    (3 per accumulator against 1). Before, the two tied and cshuffle won by name; on the
    H200 (12-04, ldmatrix kernels) it was ~1.2x slower on every such layer."""
    from wgradcache.pipeline.select import warp_issue_epilogue

    p = ConvProblem.parse("32,256,56,56,512,1,1,2,0")
    cs = _spec("sm_90-fp16-t128x64x32-w2x2-v8x8-sync-cshuffle-atomic")
    df = _spec("sm_90-fp16-t128x64x32-w2x2-v8x8-sync-default-atomic")
    assert (warp_issue_epilogue(df), warp_issue_epilogue(cs)) == (64, 192)  # 4x2 atoms
    got = select("sm_90", p, [cs, df], prune=False)
    assert [c.spec.label() for c in got] == [df.label(), cs.label()]
    assert got[0].grid == got[1].grid and got[0].score < got[1].score


def test_a_grouped_twin_ties_and_ranks_after_its_row_major_kernel_in_any_input_order():
    """The cost model ignores the CTA order; the pick must not depend on the input order."""
    p = ConvProblem.parse("32,256,28,28,512,3,3,1,1")
    rm = _spec("sm_90-fp16-t128x128x32-w2x4-v8x8-sync-default-atomic")
    g8 = _spec("sm_90-fp16-t128x128x32-w2x4-v8x8-sync-default-atomic-g8")
    narrow = _spec("sm_90-fp16-t128x128x32-w2x4-v4x4-sync-default-atomic-g8")
    for specs in ([rm, g8, narrow], [narrow, g8, rm]):
        got = select("sm_90", p, specs)
        assert [c.spec.label() for c in got] == [rm.label(), g8.label()]  # v4x4 pruned
        assert got[0].score == got[1].score and got[0].grid == got[1].grid
    # a narrower grouped kernel is pruned by its own kind only
    assert {c.spec for c in select("sm_90", p, [rm, narrow])} == {rm, narrow}


def test_a_deeper_ring_ties_with_its_two_stage_twin_and_is_pruned_by_its_own_kind():
    """The cost model ignores the ring depth; narrower chunks of a ring kernel are pruned
    against ring kernels only (a c16 ping-pong does not prune a c4 ring)."""
    p = ConvProblem.parse("32,256,28,28,512,3,3,1,1")
    two = _spec("sm_90-fp16-t128x128x32-w2x4-c16x16-async-default-atomic")
    s3 = _spec("sm_90-fp16-t128x128x32-w2x4-c16x16-async-default-atomic-s3")
    narrow = _spec("sm_90-fp16-t128x128x32-w2x4-c4x4-async-default-atomic-s4")
    for specs in ([two, s3], [s3, two]):
        got = select("sm_90", p, specs)
        assert [c.spec.label() for c in got] == [two.label(), s3.label()]
        assert got[0].score == got[1].score and got[0].grid == got[1].grid
    assert {c.spec for c in select("sm_90", p, [two, narrow])} == {two, narrow}


def test_the_stem_prefers_the_wider_tile_that_halves_narrow_loads_per_wave():
    """ResNet-50 conv1 (C=3, vec_b 1): tile area x K x waves ranked 32x32 first (4 waves of
    1020 CTAs against 3 of 640); its 36 narrow vectors per thread cost more slots than the
    64x32 tile's 20 over two waves. Measured: the 64x32 kernel 1.39x faster."""
    p = ConvProblem.parse("32,3,224,224,64,7,7,2,3")
    got = select("sm_90", p,
                 [_spec("sm_90-fp16-t32x32x32-w1x1-v8x1-sync-default-two_stage-wsr8"),
                  _spec("sm_90-fp16-t64x32x32-w2x1-v8x1-sync-default-two_stage-wsr8")],
                 prune=False)
    # the waves rule (264 CTA slots: 132 SMs x 2): 5 x 105 CTAs in 2 rounds of 120 K tiles,
    # 10 x 79 in 3 of 159; rounds x (resident waves x K tiles x slots / issue rate, or the
    # LDS reads where longer: the 64x32 tile's 2 x 120 x 8192 B over 128 B a clock, + 32
    # epilogue slots a wave at the issue rate) x 1.1 (stage 2)
    assert [(c.spec.label(), c.grid, round(c.score, 3)) for c in got] == [
        ("sm_90-fp16-t64x32x32-w2x1-v8x1-sync-default-two_stage-wsr8", (5, 1, 105),
         round(2 * (max(4 * 120 * 58 / 2, 2 * 120 * 8192 / 128) + 4 * 32 / 2) * 1.1, 3)),
        ("sm_90-fp16-t32x32x32-w1x1-v8x1-sync-default-two_stage-wsr8", (5, 2, 79),
         round(3 * 2 * (159 * 90 + 32) / 1 * 1.1, 3))]


# ---- the code object's counts rank a cached kernel (CodeFacts) ------------------------------

@pytest.mark.parametrize("isa, why", [
    ({}, "no loop recorded"),
    ({"main_loop_instructions": 100, "main_loop_mma": 0, "instructions": 400}, "no MMA"),
    ({"main_loop_instructions": True, "main_loop_mma": 8, "instructions": 400}, "bool"),
    ({"main_loop_instructions": "100", "main_loop_mma": 8, "instructions": 400}, "str"),
    ({"main_loop_instructions": 500, "main_loop_mma": 8, "instructions": 400}, "loop > all"),
    ({"main_loop_instructions": 4, "main_loop_mma": 8, "instructions": 400}, "mma > loop"),
    ({"main_loop_instructions": -1, "main_loop_mma": -8, "instructions": 400}, "negative"),
])
def test_code_facts_refuse_what_no_compiler_makes(isa, why):
    from wgradcache.pipeline.select import CodeFacts

    assert CodeFacts.from_isa(isa) is None, why


def test_issue_slots_scale_an_unrolled_loop_to_one_k_tile():
    """sm_90 t64x64x32-w2x2: a wave's 32x32 tile is 2x2 atoms of two m16n8k16 each, two
    k-steps a K tile: 16 MMA instructions per K tile; a loop body of 32 MMAs (unrolled
    twice) and 300 instructions costs 150 a tile; the epilogue's formula count is scaled by
    the same code-to-formula ratio (150 / 22 formula slots), whatever the static count
    outside the loop."""
    from wgradcache.pipeline.select import (
        CodeFacts,
        issue_slots,
        warp_issue_epilogue,
        warp_issue_per_k_tile,
    )

    spec = _spec("sm_90-fp16-t64x64x32-w2x2-c16x16-async-default-none")
    # formula: 2 k-steps x (4 atoms + 2 + 2 reads) + 4 copies + 2 = 22; epilogue 2x2 atoms
    # x 256 accumulators / 32 lanes = 32
    assert (warp_issue_per_k_tile(spec), warp_issue_epilogue(spec)) == (22, 32)
    assert issue_slots(spec) == (22, 32)
    assert issue_slots(spec, CodeFacts(300, 32)) == (150.0, 32 * 150 / 22)
    for total in (1000, 5000):  # the kernel's static count changes nothing
        facts = CodeFacts.from_isa({"main_loop_instructions": 150, "main_loop_mma": 16,
                                    "instructions": total})
        assert issue_slots(spec, facts) == (150.0, 32 * 150 / 22)
    gfx = _spec("gfx1250-fp16-t64x64x32-w2x2-c16x16-async-default-none")
    per_tile, _ = issue_slots(gfx, CodeFacts(80, 4))
    assert per_tile == 80.0  # one WMMA an atom, one k-step: 4 a tile


def test_select_ranks_cached_kernels_by_their_code_objects():
    """Two kernels the formula ranks one way; their code objects say the other: the facts
    win, and the JSON says where each score came from."""
    from wgradcache.pipeline.select import CodeFacts

    p = ConvProblem.parse("32,64,56,56,64,3,3,1,1")
    a = _spec("sm_90-fp16-t64x64x32-w2x2-c16x16-async-default-none")
    b = _spec("sm_90-fp16-t64x64x32-w2x2-v8x8-sync-default-none")
    plain = select("sm_90", p, [a, b])
    assert plain[0].spec == a and {c.cost_from for c in plain} == {"formula"}
    facts = {a.identity_key(): CodeFacts(400, 16), b.identity_key(): CodeFacts(200, 16)}
    ranked = select("sm_90", p, [a, b], costs=CostSources(facts))
    assert [c.spec for c in ranked] == [b, a]
    assert {c.cost_from for c in ranked} == {"code object"}
    only_b = select("sm_90", p, [a, b],
                    costs=CostSources({b.identity_key(): CodeFacts(200, 16)}))
    assert {c.spec.label(): c.cost_from for c in only_b} == {a.label(): "formula",
                                                            b.label(): "code object"}


@pytest.mark.parametrize("target", ["gfx1250", "gfx942", "gfx1151", "sm_90"])
def test_depthwise_layers_are_offered_a_depthwise_kernel_and_no_other_layer_is(target):
    """Every depthwise reference layer (MobileNetV2 3x3, EfficientNet 5x5) is offered a
    direct depthwise kernel beside the GEMM kernels that serve it; a layer with groups != C
    never is. On sm_90 the model ranks it first on every MobileNetV2 layer."""
    specs = candidates_from_walk(target, "fp16")
    firsts = set()
    for layer in LAYERS:
        p = layer.problem
        kinds = [c.spec.k_loop == "depthwise" for c in select(target, p, specs)]
        assert (any(kinds), all(kinds)) == (p.groups == p.C == p.K, False), layer.name
        if kinds[0]:
            firsts.add(layer.name)
    if target == "sm_90":
        assert {n for n in firsts if n.startswith("mobilenetv2/")} == {
            "mobilenetv2/dw112", "mobilenetv2/dw112.s2", "mobilenetv2/dw56",
            "mobilenetv2/dw28", "mobilenetv2/dw14", "mobilenetv2/dw7"}


@pytest.mark.parametrize("target", ["gfx1250", "gfx1201", "gfx1151", "gfx942", "sm_90"])
def test_stems_are_offered_a_small_c_kernel_and_no_other_layer_is(target):
    """The stems of C <= 4 whose filter the walk's small-C kernels hold (MobileNetV2's and
    UNet's 3x3; not ResNet-50's 7x7, past every walked T) are offered a direct small-C
    kernel beside the GEMM kernels that serve them; no other reference layer is."""
    specs = candidates_from_walk(target, "fp16")
    offered = set()
    for layer in LAYERS:
        kinds = [c.spec.k_loop == "small_c" for c in select(target, layer.problem, specs)]
        assert not all(kinds), layer.name
        if any(kinds):
            offered.add(layer.name)
    assert offered == {"mobilenetv2/stem", "unet/in.stem"}


def test_a_small_c_kernel_of_more_channels_does_not_prune_its_twin():
    """vec_b is a small-C kernel's compiled channel count, not a load width: at one
    geometry the C 3 and the C 4 kernels both stay (a C 3 layer on the C 4 kernel does a
    third more work)."""
    from wgradcache.model.spec import from_label

    c3 = from_label("sm_90-fp16-t3x16x16-w8x1-v1x3-small_c-default-atomic")
    c4 = from_label("sm_90-fp16-t3x16x16-w8x1-v1x4-small_c-default-atomic")
    ranked = select("sm_90", ConvProblem.parse("64,3,224,224,32,3,3,2,1"), [c4, c3])
    assert [c.spec for c in ranked] == [c3, c4]
    assert [c.spec for c in select("sm_90", ConvProblem.parse("8,4,64,64,32,3,3,1,1"),
                                   [c4, c3])] == [c4]
