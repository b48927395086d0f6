"""Shared fixtures: a small job-data file and a small built gfx1250 cache (built once)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from wgradcache.cli import main
from wgradcache.jobs.geometries import default_path


def tune_doc(cache) -> dict:
    """A whole ``tune --json`` document: one row of a kernel of the small gfx1250 ``cache``
    that serves its problem (what ``tune --import`` and the nightly plan's timings read)."""
    from wgradcache.cache.store import TargetCache

    entry = next(e for _, e in TargetCache(cache, "gfx1250").iter_entries()
                 if e.label == "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none")
    return {"target": "gfx1250",
            "device": {"name": "AMD Fake GPU", "sm_count": 256, "driver": "6.4",
                       "runtime": "6.4"},
            "rows": [{"identity_key": entry.identity_key, "blob": entry.blob,
                      "problem": "2,32,8,8,32,3,3,1,1", "dtype": "fp16", "degree": 1,
                      "median_ms": 0.5, "spread_ms": 0.01, "iterations": 10,
                      "when": 100.0}],
            "vendor": [], "fit": None}


def small_geometries(tmp: Path, cover=((32, 32, 32, 1, 1),), extra_ladder=(),
                     cta_orders: bool = False, depthwise=None, stages: bool = False,
                     small_c=None) -> Path:
    """The shipped file cut down to a one-geometry ladder (plus extras), one vec pair and one
    chunk pair, row-major CTA order only unless ``cta_orders``, no depthwise or small-C
    kernels unless ``depthwise`` or ``small_c`` (their entries), the two-stage async loop
    only unless ``stages``: every GEMM variant, few jobs."""
    doc = yaml.safe_load(default_path().read_text())
    geoms = list(cover) + list(extra_ladder)
    doc["ladder"] = {name: sorted({g[i] for g in geoms}) for i, name in
                     enumerate(("tile_m", "tile_n", "tile_k", "warp_m", "warp_n"))}
    doc.pop("ladder_targets", None)  # every target walks the one small ladder
    if not cta_orders:
        doc.pop("cta_orders", None)
    doc.pop("depthwise", None)
    if depthwise:
        doc["depthwise"] = [list(e) for e in depthwise]
    doc.pop("small_c", None)
    if small_c:
        doc["small_c"] = [list(e) for e in small_c]
    if not stages:
        doc.pop("stages", None)
    doc["vec_pairs"] = [[8, 8]]
    doc["async_chunk_pairs"] = [[16, 16]]
    doc["cover"] = [{"geometry": list(g), "reason": "test cover entry"} for g in cover]
    p = tmp / "geometries.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


@pytest.fixture(scope="session")
def small_cache(tmp_path_factory):
    """One geometry, every variant, both dtypes, built through the CLI (18 jobs)."""
    root = tmp_path_factory.mktemp("small_cache")
    geo = small_geometries(root)
    cache = root / "cache"
    r = CliRunner().invoke(main, ["build", "--target", "gfx1250", "--geometries", str(geo),
                                  "--dtype", "fp16", "--dtype", "bf16", "--cache-dir",
                                  str(cache), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output.strip().splitlines()[-1])
    return {"root": root, "geometries": geo, "cache": cache, "summary": summary}
