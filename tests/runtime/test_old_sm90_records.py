"""An sm_90 cache built before its records spoke NVIDIA's words (the AMD note's field names,
parameters by ordinal) stays usable: it reads as this version's records, verifies, selects,
launches, relinks and merges as the same cache written today does."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from fake_cuda import FakeCuda

import wgradcache.runtime.cuda as cuda_mod
from tests.conftest import small_geometries
from wgradcache.cache.store import TargetCache
from wgradcache.cli import main
from wgradcache.pipeline.build import BuildRequest, build

# how the version before wrote a cubin's record (compile/cubin.read_cubin's old dict)
_OLD_NAMES = {"sm": "mach", "has_nv_info": "has_descriptor", "registers": "vgpr_count",
              "static_shared_bytes": "group_segment_fixed_size",
              "local_bytes": "private_segment_fixed_size",
              "max_threads_per_block": "max_flat_workgroup_size",
              "param_bytes": "kernarg_segment_size"}
_OLD_CONSTANTS = {"code_object_version": 0, "agpr_count": 0, "sgpr_count": 0,
                  "vgpr_spill_count": 0, "sgpr_spill_count": 0, "wavefront_size": 32}


def old_record(co: dict) -> dict:
    old = {_OLD_NAMES.get(k, k): v for k, v in co.items() if k != "dynamic_shared_bytes"}
    old["args"] = [{**a, "name": f"param{i}"} for i, a in enumerate(co["args"])]
    return {**old, **_OLD_CONSTANTS}


def write_old(root) -> int:
    """Rewrite every sm_90 record under ``root`` as the version before wrote it (compact,
    sorted keys); the number of records rewritten."""
    n = 0
    for sub in ("entries", "stage2", "blobs"):
        for p in sorted((root / "sm_90" / sub).glob("*.json")):
            doc = json.loads(p.read_text())
            assert "registers" in doc["code_object"]  # written in NVIDIA's words today
            doc["code_object"] = old_record(doc["code_object"])
            p.write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")))
            n += 1
    return n


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    """The same small sm_90 cache twice: as built today, and rewritten in the old form."""
    root = tmp_path_factory.mktemp("old_sm90")
    geo = small_geometries(root)
    s = build(BuildRequest(target="sm_90", dtypes=("fp16",), geometries_file=str(geo),
                           variants=("sync.default.none", "sync.default.atomic",
                                     "sync.default.two_stage"),
                           cache_dir=str(root / "new"), jobs=1))
    assert (s.jobs, s.failed) == (3, 0)
    shutil.copytree(root / "new", root / "old")
    assert write_old(root / "old") == 3 + 1 + 4  # entries, the stage-2 kernel, sidecars
    return {"new": root / "new", "old": root / "old", "geometries": geo, "root": root}


def _records(c):
    cache = TargetCache(c, "sm_90")
    return ([e for _, e in cache.iter_entries()], cache.read_stage2("fp16-wsr8"))


def _cli(c, geo, *args):
    r = CliRunner().invoke(main, [*args, "--cache-dir", str(c), "--geometries", str(geo),
                                  "--json"])
    return r.exit_code, json.loads(r.stdout)


def test_an_old_record_reads_as_todays(caches):
    (new, new_s2), (old, old_s2) = _records(caches["new"]), _records(caches["old"])
    assert old == new and old_s2 == new_s2
    co = old[0].code_object
    assert co["args"][0]["name"] == "dy_ptr" and "vgpr_count" not in co
    assert [a["name"] for a in old_s2.code_object["args"]][:2] == ["ws_ptr", "dw_ptr"]
    r = CliRunner().invoke(main, ["show", old[0].label, "--cache-dir", str(caches["old"])])
    assert "registers" in r.output and "vgpr" not in r.output


def test_an_old_cache_verifies_and_selects_as_todays(caches):
    geo = caches["geometries"]
    for level in ("integrity", "structure"):
        (rc_new, new), (rc_old, old) = (_cli(caches[k], geo, "verify", "--from-cache",
                                             "--level", level) for k in ("new", "old"))
        assert (rc_old, old["failures"], old["checked"]) == (0, [], new["checked"]) and \
            rc_new == 0
    select = ("select", "--target", "sm_90", "--problem", "2,32,8,8,32,3,3")
    assert _cli(caches["old"], geo, *select) == _cli(caches["new"], geo, *select)


def test_an_old_cache_launches_as_todays(caches, monkeypatch):
    launched = []
    for k in ("new", "old"):
        fake = FakeCuda()
        monkeypatch.setattr(cuda_mod, "cuda_driver", lambda fake=fake: fake)
        rc, doc = _cli(caches[k], caches["geometries"], "verify", "--from-cache", "--level",
                       "numerics", "--device", "cuda", "--no-reproduce")
        assert (rc, doc["failures"]) == (0, [])
        launched.append(sorted(ln.symbol for ln in fake.launches))
    assert launched[0] == launched[1] and launched[0]


def test_an_old_sidecar_is_relinked_and_an_old_cache_merged(caches):
    """fp16_f32's two-stage kernel is fp16's IR under another name: a build relinks it to
    the blob whose sidecar is in the old form; merge takes the old records whole."""
    c = caches["root"] / "relink"
    shutil.copytree(caches["old"], c)
    s = build(BuildRequest(target="sm_90", dtypes=("fp16", "fp16_f32"),
                           geometries_file=str(caches["geometries"]),
                           variants=("sync.default.two_stage",), cache_dir=str(c), jobs=1))
    assert (s.jobs, s.up_to_date, s.relinked, s.built, s.failed) == (2, 1, 1, 0, 0)
    dest = caches["root"] / "merged"
    r = CliRunner().invoke(main, ["merge", str(caches["old"]), "--into", str(dest)])
    assert r.exit_code == 0, r.output
    assert _records(dest) == _records(caches["new"])
