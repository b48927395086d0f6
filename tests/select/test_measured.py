"""select ranks by measured times, then by the cost model fitted to them, then by the
formula; tune --import brings the times in; fit refits. On a copy of the small gfx1250
cache, with synthetic timings (no device)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
from click.testing import CliRunner

from wgradcache.cache.store import TargetCache
from wgradcache.cache.timings import DeviceClass, Fit, TimingRow, TimingsFile, timings_json
from wgradcache.cli import main
from wgradcache.model.problem import ConvProblem
from wgradcache.pipeline.fit import FitSample, fit_samples
from wgradcache.pipeline.select import (
    CostSources,
    candidates_from_cache,
    candidates_from_walk,
    cost_terms,
    fitted_ms,
    select,
)

T = "gfx1250"
DEV = DeviceClass("AMD Fake GPU", 256, "6.4", "6.4")
P = "2,32,8,8,32,3,3,1,1"
TRUE = {"launch": 0.004, "issue": 2.5e-6, "lds": 1.2e-6, "epilogue": 4e-6, "l2": 1e-9}
PROBLEMS = ["2,32,8,8,32,3,3,1,1", "1,32,16,16,64,1,1", "4,64,8,8,32,3,3,1,1",
            "1,16,32,32,32,3,3,1,1", "8,32,8,8,64,1,1", "2,64,16,16,32,1,1,2"]


@pytest.fixture
def cache(small_cache, tmp_path):
    dst = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], dst)
    return dst


def _select(cache, problem=P, *extra):
    r = CliRunner().invoke(main, ["select", "--target", T, "--problem", problem,
                                  "--cache-dir", str(cache), "--json", *extra])
    return r, (json.loads(r.stdout) if r.exit_code == 0 else None)


def _served(cache, problem: str):
    got = candidates_from_cache(str(cache), T, "fp16")
    p = ConvProblem.parse(problem)
    return got, p, select(T, p, got.specs, costs=CostSources(got.facts))


def _rows(cache, problem: str, ms_of, when: float = 100.0) -> list[TimingRow]:
    got, p, cands = _served(cache, problem)
    return [TimingRow(c.key, got.blobs[c.key], p.short(), "fp16", c.degree, ms_of(c), 0.0,
                      10, when) for c in cands]


def _write(cache, rows, device=DEV, fit=None):
    c = TargetCache(cache, T)
    with c.lock():
        c.write_timings(TimingsFile(device, tuple(rows), (), fit))


def test_select_ranks_by_measured_times_exactly(cache):
    _, _, cands = _served(cache, P)
    # a made-up time per kernel, the reverse of the formula's order
    ms = {c.key: 0.1 * (i + 1) for i, c in enumerate(reversed(cands))}
    _write(cache, _rows(cache, P, lambda c: ms[c.key]))
    r, doc = _select(cache)
    assert r.exit_code == 0, r.output
    got = [(c["label"], c["cost_from"], c["expected_ms"]) for c in doc["candidates"]]
    assert got == [(c.spec.label(), "measured", round(ms[c.key], 6))
                   for c in sorted(cands, key=lambda c: ms[c.key])]


def test_a_stale_row_is_ignored_and_its_kernel_ranks_by_the_formula(cache):
    _, _, cands = _served(cache, P)
    rows = _rows(cache, P, lambda c: 1.0)
    first = cands[0]
    # the formula's best kernel was timed fastest, but on a blob it no longer has
    rows = [r if r.identity_key != first.key else
            TimingRow(r.identity_key, "ab" * 32, *[getattr(r, f) for f in (
                "problem", "dtype", "degree")], 0.001, 0.0, 10, 100.0) for r in rows]
    _write(cache, rows)
    _, doc = _select(cache)
    order = [(c["label"], c["cost_from"]) for c in doc["candidates"]]
    assert order[-1] == (first.spec.label(), "code object")  # after every measured one
    assert [f for _, f in order[:-1]] == ["measured"] * (len(cands) - 1)


def test_the_fit_recovers_known_constants_within_5_percent():
    """Times made from known constants with +-2 % seeded noise (a device's run-to-run
    spread): every constant comes back within 5 %, the residual near the noise."""
    import random

    rng = random.Random(0)
    true = {**TRUE, "stage2": 2e-8}
    specs = candidates_from_walk(T, "fp16") + candidates_from_walk(T, "bf16")
    samples = []
    for text in PROBLEMS:
        p = ConvProblem.parse(text)
        for c in select(T, p, specs)[:40]:
            terms = cost_terms(c.spec, p, c.slice_k, c.grid)
            samples.append(FitSample(terms, fitted_ms(true, terms) * rng.uniform(0.98, 1.02)))
    got = fit_samples(samples)
    assert not isinstance(got, str), got
    assert set(got.constants) == set(true)
    for name, want in true.items():
        assert abs(got.constants[name] - want) <= 0.05 * want, (name, got.constants)
    assert 0.005 < got.residual < 0.02 and got.rows == len(samples) == 240


def test_fit_stores_the_fit_and_select_ranks_unmeasured_problems_by_it(cache):
    facts = candidates_from_cache(str(cache), T, "fp16").facts
    rows = []
    for text in PROBLEMS[1:]:
        p = ConvProblem.parse(text)
        rows += _rows(cache, text, lambda c, p=p: fitted_ms(
            TRUE, cost_terms(c.spec, p, c.slice_k, c.grid, facts.get(c.key))))
    _write(cache, rows)
    r = CliRunner().invoke(main, ["fit", "--target", T, "--cache-dir", str(cache), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["device_class"] == DEV.slug() and doc["reason"] == ""
    fit = doc["fit"]
    assert (fit["rows"], fit["kernels"], fit["problems"]) == (len(rows), 8, 5)
    for name, want in TRUE.items():
        assert abs(fit["constants"][name] - want) <= 0.05 * want, (name, fit["constants"])
    stored = TargetCache(cache, T).read_timings(DEV.slug()).fit
    assert stored is not None and stored.constants == fit["constants"]
    # P was not measured: every candidate ranks by the fitted model, in its true order
    _, p, cands = _served(cache, P)
    truth = sorted(cands, key=lambda c: (fitted_ms(TRUE, cost_terms(
        c.spec, p, c.slice_k, c.grid, facts.get(c.key))), c.spec.label()))
    _, doc = _select(cache)
    assert [c["cost_from"] for c in doc["candidates"]] == ["fitted"] * len(cands)
    assert [c["label"] for c in doc["candidates"]] == [c.spec.label() for c in truth]


def test_a_graph_timed_class_supersedes_the_same_devices_host_timed_one(cache):
    """A re-tune by graph replay of the device the host-timed rows came from: select reads
    the graph rows without --device-class; another device's class still has to be named."""
    graphed = dataclasses.replace(DEV, timing="graph")
    _write(cache, _rows(cache, P, lambda c: 1.0))  # DEV: timed from the host
    _write(cache, _rows(cache, P, lambda c: 0.5), device=graphed)
    r, doc = _select(cache)
    assert r.exit_code == 0, r.output
    assert {c["expected_ms"] for c in doc["candidates"]} == {0.5}
    r, doc = _select(cache, P, "--device-class", DEV.slug())  # still there when named
    assert {c["expected_ms"] for c in doc["candidates"]} == {1.0}
    other = DeviceClass("AMD Other GPU", 128, "6.4", "6.4")
    _write(cache, _rows(cache, P, lambda c: 2.0), device=other)
    r, _ = _select(cache)
    a, b = sorted([graphed.slug(), other.slug()])
    assert (r.exit_code, r.output) == (2, f"error: the {T} cache has timings of 2 device "
                                          f"classes ({a}, {b}): name one with --device-class\n")


def test_too_few_rows_store_no_fit(cache):
    _write(cache, _rows(cache, P, lambda c: 1.0)[:3])
    r = CliRunner().invoke(main, ["fit", "--target", T, "--cache-dir", str(cache)])
    assert r.exit_code == 0, r.output
    assert r.output == (f"{DEV.slug()}: not fitted: 3 current row(s), too few to fit 5 "
                        "constants (at least 8)\n")


def test_the_device_class_is_the_only_one_or_must_be_named(cache):
    other = DeviceClass("AMD Other GPU", 128, "6.4", "6.4")
    _write(cache, _rows(cache, P, lambda c: 1.0))
    _write(cache, _rows(cache, P, lambda c: 2.0), device=other)
    r, _ = _select(cache)
    a, b = sorted([DEV.slug(), other.slug()])
    assert r.exit_code == 2
    assert r.output == (f"error: the {T} cache has timings of 2 device classes ({a}, {b}): "
                        "name one with --device-class\n")
    r, doc = _select(cache, P, "--device-class", other.slug())
    assert {c["expected_ms"] for c in doc["candidates"]} == {2.0}
    r, _ = _select(cache, P, "--device-class", "../x")
    assert r.exit_code == 2 and r.output == (
        f"error: --device-class '../x': no timings of it in the {T} cache (it has: {a}, {b})\n")


def _tune_doc(cache, problem=P) -> dict:
    doc = timings_json(TimingsFile(DEV, tuple(_rows(cache, problem, lambda c: 0.25))))
    return {"target": T, **doc}


def test_import_of_tune_json_then_select_ranks_by_it(cache, tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(_tune_doc(cache)))
    r = CliRunner().invoke(main, ["tune", "--import", str(f), "--cache-dir", str(cache),
                                  "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"target": T, "device_class": DEV.slug(),
                                    "device": "AMD Fake GPU (256 SMs/CUs, driver 6.4, "
                                              "runtime 6.4; timed from the host)",
                                    "imported": 8, "added": 8, "rows": 8,
                                    "refit": "fitted on 8 rows (8 kernels, 1 problems), RMS "
                                             "relative residual 0.000"}
    _, doc = _select(cache)
    assert {c["cost_from"] for c in doc["candidates"]} == {"measured"}
    # again: nothing new
    r = CliRunner().invoke(main, ["tune", "--import", str(f), "--cache-dir", str(cache),
                                  "--json"])
    assert (json.loads(r.stdout)["added"], json.loads(r.stdout)["rows"]) == (0, 8)


def test_import_of_a_device_speed_file(cache, tmp_path):
    _, p, cands = _served(cache, P)
    doc = {"device": "gfx1250 device 0 (AMD Fake GPU)", "iters": 10, "top": 8,
           "timings": [{"layer": "net/a", "problem": p.short(), "dtype": "fp16", "rank": i + 1,
                        "label": c.spec.label(), "geometry": list(c.spec.geometry),
                        "split_k": c.degree, "reduction": c.reduction, "ms": 0.5 + i,
                        "tflops": 1.0} for i, c in enumerate(cands)],
           "layers": [{"layer": "net/a", "problem": p.short(), "dtype": "fp16",
                       "cudnn_ms": 0.75}]}
    f = tmp_path / "speed.json"
    f.write_text(json.dumps(doc))
    r = CliRunner().invoke(main, ["tune", "--import", str(f), "--cache-dir", str(cache),
                                  "--json"])
    assert r.exit_code == 0, r.output
    slug = DeviceClass("AMD Fake GPU", 0, "", "").slug()
    assert json.loads(r.stdout)["device_class"] == slug
    tf = TargetCache(cache, T).read_timings(slug)
    assert sorted((r.median_ms, r.iterations, r.spread_ms) for r in tf.rows) == \
        [(0.5 + i, 10, 0.0) for i in range(len(cands))]
    assert [(v.library, v.median_ms) for v in tf.vendor] == [("cudnn", 0.75)]
    _, out = _select(cache)
    assert [c["label"] for c in out["candidates"]] == [c.spec.label() for c in cands]
    assert [c["expected_ms"] for c in out["candidates"]] == [0.5 + i for i in range(len(cands))]


def test_show_prints_a_kernels_measured_times(cache):
    from wgradcache.cache.timings import VendorRow

    _, _, cands = _served(cache, P)
    c = TargetCache(cache, T)
    with c.lock():
        c.write_timings(TimingsFile(DEV, tuple(_rows(cache, P, lambda c: 0.125)), (
            VendorRow("cudnn", P, "fp16", 0.25, 0.0, 10, 1.0),)))
    r = CliRunner().invoke(main, ["show", cands[0].spec.label(), "--cache-dir", str(cache)])
    assert r.exit_code == 0, r.output
    assert ("measured on AMD Fake GPU (256 SMs/CUs, driver 6.4, runtime 6.4; timed from the "
            f"host) [{DEV.slug()}]") in r.output
    line = next(ln for ln in r.output.splitlines() if P in ln)
    assert line.split() == ["│", P, "│", "fp16", "│", "1", "│", "0.1250", "│", "0.0000",
                            "│", "10", "│", "cudnn", "0.2500", "│"]
    assert "fit factor" not in r.output  # no fit yet
    with c.lock():
        tf = c.read_timings(DEV.slug())
        c.write_timings(dataclasses.replace(tf, fit=Fit(dict(TRUE), 0.1, 8, 8, 1, "0" * 64,
                                                        100.0, {cands[0].key: 1.375})))
    r = CliRunner().invoke(main, ["show", cands[0].spec.label(), "--cache-dir", str(cache)])
    assert r.exit_code == 0, r.output
    assert ("; fit factor 1.375 (its measured over the fitted model's times)"
            in " ".join(r.output.split()).replace("│ ", ""))


def test_a_timings_file_that_is_not_whole_stops_select_in_one_line(cache):
    path = TargetCache(cache, T).timings_path(DEV.slug())
    path.parent.mkdir()
    path.write_text('{"device": {"name": "AMD Fake GPU"')
    r, _ = _select(cache)
    assert (r.exit_code, r.output) == (
        1, f"failed: {path}: corrupt: not whole JSON (Expecting ',' delimiter at char 34)\n")


def test_a_fit_that_predicts_no_time_falls_back_to_the_formula():
    terms = {"launch": 1.0, "issue": 100.0, "lds": 0.0, "epilogue": 0.0, "stage2": 0.0}
    assert fitted_ms({"launch": 0.01, "issue": 1e-4, "lds": 1.0}, terms) == pytest.approx(0.02)
    assert fitted_ms({"launch": -0.02, "issue": 1e-4}, terms) is None  # -0.01 ms
    assert fitted_ms({"launch": 0.01}, terms) is None  # issue was never fitted


def test_a_graph_timed_speed_file_is_a_class_of_its_own(cache, tmp_path):
    """device_speed.py files say how they timed (``timing``; none: from the host, before
    12-07): a graph-timed file makes a class of its own and never joins a host-timed one;
    any other value is refused in one line with nothing imported."""
    doc, f = _speed_file(cache, tmp_path, timing="graph")  # DEV: timed from the host
    r = CliRunner().invoke(main, ["tune", "--import", str(f), "--cache-dir", str(cache),
                                  "--device-class", DEV.slug()])
    assert (r.exit_code, r.output) == (2, f"error: {f}: timed by graph replay, class "
                                          f"{DEV.slug()} from the host: rows of two timing "
                                          "methods are not ranked together\n")
    r = CliRunner().invoke(main, ["tune", "--import", str(f), "--cache-dir", str(cache),
                                  "--json"])
    assert r.exit_code == 0, r.output
    slug = DeviceClass("AMD Fake GPU", 0, "", "", "graph").slug()
    assert json.loads(r.stdout)["device_class"] == slug
    assert sorted(TargetCache(cache, T).timing_classes()) == sorted([DEV.slug(), slug])
    for bad in ("GRAPH", "../x", 3):
        f.write_text(json.dumps({**doc, "timing": bad}))
        r = CliRunner().invoke(main, ["tune", "--import", str(f), "--cache-dir", str(cache)])
        assert (r.exit_code, r.output) == (2, f"error: {f}: timing: {str(bad)!r} is not "
                                              "'graph' or 'eager'\n")
    assert len(TargetCache(cache, T).read_timings(slug).rows) == 2


def _speed_file(cache, tmp_path, **extra):
    """One DEV row in the cache, and a device_speed.py file of two other kernels' rows."""
    _write(cache, _rows(cache, P, lambda c: 1.0)[:1])
    _, p, cands = _served(cache, P)
    doc = {"device": "gfx1250 device 0 (AMD Fake GPU)", "iters": 5, **extra,
           "timings": [{"layer": "net/a", "problem": p.short(), "dtype": "fp16",
                        "label": c.spec.label(), "split_k": c.degree, "ms": 0.5}
                       for c in cands[1:3]]}
    f = tmp_path / "speed.json"
    f.write_text(json.dumps(doc))
    return doc, f


def test_a_device_speed_file_joins_a_named_class(cache, tmp_path):
    _, f = _speed_file(cache, tmp_path)
    r = CliRunner().invoke(main, ["tune", "--import", str(f), "--cache-dir", str(cache),
                                  "--device-class", DEV.slug(), "--json"])
    assert r.exit_code == 0, r.output
    assert (json.loads(r.stdout)["device_class"], json.loads(r.stdout)["rows"]) == \
        (DEV.slug(), 3)
    assert TargetCache(cache, T).timing_classes() == [DEV.slug()]
    r = CliRunner().invoke(main, ["tune", "--import", str(f), "--cache-dir", str(cache),
                                  "--device-class", "amd-other-0123456789ab"])
    assert (r.exit_code, r.output) == (2, "error: --device-class amd-other-0123456789ab: no "
                                          f"such class in the {T} cache (it has: "
                                          f"{DEV.slug()})\n")


def test_select_launches_the_fastest_measured_degree(cache):
    """Rows of one split-K kernel at several degrees (a sweep, or an earlier policy's tune):
    select launches the fastest that serves, with that degree's plan; a row at a degree the
    kernel cannot run (split on a kernel without a split-K reduction) is ignored."""
    from wgradcache.wgrad.split_k import plan_split_k

    got, p, cands = _served(cache, P)
    split = next(c for c in cands if c.reduction == "atomic")
    plain = next(c for c in cands if c.reduction == "none")
    other = next(d for d in (3, 2, 4) if d != split.degree)
    rows = _rows(cache, P, lambda c: 1.0)
    extra = [TimingRow(split.key, got.blobs[split.key], p.short(), "fp16", other, 0.5, 0.0,
                       10, 100.0),
             TimingRow(plain.key, got.blobs[plain.key], p.short(), "fp16", 4, 0.01, 0.0,
                       10, 100.0)]
    _write(cache, rows + extra)
    r, doc = _select(cache)
    assert r.exit_code == 0, r.output
    top, *rest = doc["candidates"]
    want = plan_split_k(split.spec, p, split_k=other)
    assert (top["label"], top["split_k"], top["slice_k"], top["grid"], top["cost_from"],
            top["expected_ms"], top["degree_from"]) == (
        split.spec.label(), other, want.slice_k, list(want.grid), "measured", 0.5, "measured")
    mine = next(c for c in rest if c["label"] == plain.spec.label())
    assert (mine["split_k"], mine["expected_ms"]) == (1, 1.0)
    # the policy's degree measured faster than the other: the policy's degree again
    _write(cache, rows + [TimingRow(split.key, got.blobs[split.key], p.short(), "fp16",
                                    other, 2.0, 0.0, 10, 100.0)])
    _, doc = _select(cache)
    mine = next(c for c in doc["candidates"] if c["label"] == split.spec.label())
    assert (mine["split_k"], mine["expected_ms"], mine["degree_from"]) == (split.degree, 1.0,
                                                                           "policy")


def test_a_measured_kernel_ranks_before_every_fitted_one(cache):
    """A fit that guesses every other kernel faster than the one measured still ranks the
    measured kernel first: a measured time is known, a fitted one is a guess."""

    got, p, cands = _served(cache, P)
    slow = cands[-1]
    rows = [TimingRow(slow.key, got.blobs[slow.key], p.short(), "fp16", slow.degree, 50.0,
                      0.0, 10, 100.0)]
    _write(cache, rows, fit=Fit(dict(TRUE), 0.1, 8, 8, 1, "0" * 64, 100.0))
    _, doc = _select(cache)
    order = [(c["label"], c["cost_from"]) for c in doc["candidates"]]
    assert order[0] == (slow.spec.label(), "measured")
    assert [f for _, f in order[1:]] == ["fitted"] * (len(cands) - 1)
    assert all(c["expected_ms"] < 50.0 for c in doc["candidates"][1:])


def test_a_stored_fit_of_the_model_before_the_l2_term_is_not_used(cache):
    """A fit stored before the ``l2`` term (its constants lack it) cannot price a launch
    of today's terms: select ranks by the code objects, as with no fit, until a refit."""
    got, p, cands = _served(cache, P)
    slow = cands[-1]
    rows = [TimingRow(slow.key, got.blobs[slow.key], p.short(), "fp16", slow.degree, 50.0,
                      0.0, 10, 100.0)]
    old = {k: v for k, v in TRUE.items() if k != "l2"}
    _write(cache, rows, fit=Fit(old, 0.1, 8, 8, 1, "0" * 64, 100.0))
    _, doc = _select(cache)
    assert [c["cost_from"] for c in doc["candidates"]] == (
        ["measured"] + ["code object"] * (len(cands) - 1))
    _write(cache, rows, fit=Fit(dict(TRUE), 0.1, 8, 8, 1, "0" * 64, 100.0))
    _, doc = _select(cache)
    assert [c["cost_from"] for c in doc["candidates"]] == (
        ["measured"] + ["fitted"] * (len(cands) - 1))


def test_the_fit_keeps_every_constant_at_zero_or_above():
    """Times of exactly 2·issue − 1 ms: the unconstrained fit is launch −1, issue 2 with
    no residual, a negative launch cost that prices a short launch at no time. The fit
    keeps launch at 0 and gives issue the relative least squares of the rest."""
    import numpy as np

    xs = np.arange(1.0, 9.0)
    ys = 2 * xs - 1
    got = fit_samples([FitSample({"launch": 1.0, "issue": float(x)}, float(y))
                       for x, y in zip(xs, ys, strict=True)])
    assert not isinstance(got, str), got
    c = float(np.sum(xs / ys) / np.sum(xs * xs / (ys * ys)))  # min Σ((c·x − y) / y)²
    # the support {launch} alone fits worse: every time is one constant
    assert got.constants == pytest.approx({"launch": 0.0, "issue": c}, rel=1e-9)
    assert got.residual == pytest.approx(float(np.sqrt(np.mean(((c * xs - ys) / ys) ** 2))))
