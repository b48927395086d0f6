"""select over a built sm_90 cache splits each kernel by its own code object's residency
(``Backend.resident_ctas`` of the entry's record), and ``serve`` (what ``select`` prints)
and ``tune`` launch the same degree."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.conftest import small_geometries
from wgradcache.cache.store import TargetCache
from wgradcache.cli import main
from wgradcache.model.backends import backend_of
from wgradcache.model.problem import ConvProblem
from wgradcache.pipeline.build import BuildRequest, build
from wgradcache.pipeline.select import candidates_from_cache, select
from wgradcache.wgrad.split_k import plan_split_k

P = "32,256,56,56,64,1,1"  # 16 tiles of 32x32, 3136 K tiles, cap 97 (fp16 packed atomic)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("resident")
    s = build(BuildRequest(target="sm_90", dtypes=("fp16",),
                           geometries_file=str(small_geometries(root)),
                           variants=("sync.default.atomic",), cache_dir=str(root / "c"),
                           jobs=1))
    assert (s.jobs, s.failed) == (1, 0)
    return root / "c"


def test_the_residency_is_the_entrys_records(cache):
    got = candidates_from_cache(str(cache), "sm_90", "fp16")
    (spec,) = got.specs
    (_, entry), = TargetCache(str(cache), "sm_90").iter_entries()
    want = backend_of("sm_90").resident_ctas(entry.code_object, "sm_90")
    assert want is not None and want > 2  # a one-warp 32x32 kernel: more than the default
    assert got.resident == {spec.identity_key(): want}


def test_select_serve_and_the_policy_agree_on_the_degree(cache):
    got = candidates_from_cache(str(cache), "sm_90", "fp16")
    p = ConvProblem.parse(P)
    (cand,) = select("sm_90", p, got.specs, costs=got.costs())
    resident = got.resident[cand.key]
    assert cand.degree == plan_split_k(cand.spec, p, resident_ctas=resident).degree == 96
    assert plan_split_k(cand.spec, p).degree == 33  # what the default residency would give
    r = CliRunner().invoke(main, ["select", "--target", "sm_90", "--problem", P, "--cache-dir",
                                  str(cache), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    rows = doc if isinstance(doc, list) else doc["candidates"]
    assert [(c["label"], c["split_k"]) for c in rows] == [(cand.spec.label(), 96)]


V = "1,128,96,96,128,1,1"  # 16 tiles of 32x32, 18 K-slices at most: the residency moves it


def test_verify_launches_the_policy_at_the_entrys_residency(cache):
    """verify's policy launch is the degree select and ``serve`` give (the entry's residency),
    not the split rule's default one, and that degree is the one launched."""
    from wgradcache.pipeline.verify import VerifyRequest, run_entry, verify

    got = candidates_from_cache(str(cache), "sm_90", "fp16")
    (spec,) = got.specs
    p = ConvProblem.parse(V)
    resident = got.resident[spec.identity_key()]
    want = plan_split_k(spec, p, resident_ctas=resident).degree
    assert (want, plan_split_k(spec, p).degree) == (18, 16)
    rep = verify(VerifyRequest(cache_dir=str(cache), targets=("sm_90",), level="numerics",
                               problems=(V,), device="emulator"))
    assert rep.ok, rep.failures
    (res,) = rep.numerics
    assert [(r.degree, r.policy) for r in res.runs if r.policy] == [(18, True)]
    assert all(r.passed for r in res.runs)
    launched = []
    run_entry(lambda q, d: launched.append(d) or _Passed(), spec, [p], resident)
    assert launched[0] == 18
    launched.clear()
    run_entry(lambda q, d: launched.append(d) or _Passed(), spec, [p])
    assert launched[0] is None  # no residency: the launcher's own rule (16)


class _Passed:
    passed = True

    def summary(self) -> str:
        return ""
