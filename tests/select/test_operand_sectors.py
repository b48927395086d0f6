"""The cost model's ``l2`` term: the 32-byte sectors a CTA's loads touch per K tile, exact
on a dense layer, a depthwise layer through a GEMM tile, and the direct kernels."""

from __future__ import annotations

from wgradcache.model.problem import ConvProblem
from wgradcache.model.spec import from_label
from wgradcache.pipeline.select import cost_terms, operand_sectors_per_k_tile
from wgradcache.wgrad.split_k import plan_split_k

P = ConvProblem.parse


def test_a_dense_tile_reads_whole_sectors():
    # fp16 128 x 64 x 32: per pixel row 128 dY channels (8 sectors) and 64 of X's (cpg 64:
    # one run of 4 sectors), 32 rows
    spec = from_label("sm_90-fp16-t128x64x32-w2x2-v8x8-sync-default-none")
    assert operand_sectors_per_k_tile(spec, P("2,64,8,8,128,3,3,1,1")) == 32 * (8 + 4)


def test_a_gemm_tile_on_a_depthwise_layer_pays_a_sector_per_element():
    # kpg = cpg = 1: one dY element a row (1 sector) and 9 taps of one channel (9 runs of
    # one sector): 10 sectors for 9 useful MACs a row
    spec = from_label("sm_90-fp16-t32x32x32-w1x1-v1x1-sync-default-none")
    assert operand_sectors_per_k_tile(spec, P("1,32,8,8,32,3,3,1,1,1,32")) == 32 * 10


def test_grouped_runs_are_cpg_channels_a_tap():
    # cpg 4 (ResNeXt's l1): 9 taps x 4 channels = 36 columns > tile_n 32, so 8 runs of 4
    # channels (8 bytes: one sector each); kpg 4: one sector of dY
    spec = from_label("sm_90-fp16-t32x32x32-w1x1-v4x4-sync-default-none")
    assert operand_sectors_per_k_tile(spec, P("1,128,8,8,128,3,3,1,1,1,32")) == 32 * (1 + 8)


def test_the_direct_kernels_read_their_channel_block_per_tap():
    dw = from_label("sm_90-fp16-t3x64x4-w4x1-v2x2-depthwise-default-none")
    # C 96 >= tile_n 64: 128 bytes (4 sectors) of dY and of X at each of 9 taps, 4 rows
    assert operand_sectors_per_k_tile(dw, P("1,96,8,8,96,3,3,1,1,1,96")) == 4 * 10 * 4
    # C 8 < tile_n: 16 bytes, one sector each
    assert operand_sectors_per_k_tile(dw, P("1,8,8,8,8,3,3,1,1,1,8")) == 4 * 10 * 1
    sc = from_label("sm_90-fp16-t3x32x8-w8x1-v1x3-small_c-default-none")
    # K 64 > tile_n 32 (2 sectors of dY), C 3 a tap (1 sector), 8 rows a step
    assert operand_sectors_per_k_tile(sc, P("1,3,16,16,64,3,3,2,1")) == 8 * (2 + 9)


def test_the_term_is_the_launchs_bytes():
    spec = from_label("sm_90-fp16-t128x64x32-w2x2-v8x8-sync-default-none")
    p = P("2,64,8,8,128,3,3,1,1")
    plan = plan_split_k(spec, p, split_k=1)
    ctas = plan.grid[0] * plan.grid[1] * plan.grid[2]
    k_tiles = -(-plan.slice_k // spec.tile_k)
    assert (ctas, k_tiles) == (9, 4)  # N 576 / 64, M 128 / 128; K 128 / 32
    assert cost_terms(spec, p, plan.slice_k, plan.grid)["l2"] == 9 * 4 * 32 * 12 * 32
