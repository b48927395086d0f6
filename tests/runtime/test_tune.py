"""wgradcache tune on a small sm_90 cache with the fake driver: each kernel's times are the
fake clock's (launch_ms), rows are written as they finish, a killed run keeps them, select
then ranks by them, and tune --json is what tune --import reads."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
from click.testing import CliRunner
from fake_cuda import FakeCuda

import wgradcache.runtime.cuda as cuda_mod
import wgradcache.runtime.timing as timing_mod
from tests.conftest import small_geometries
from wgradcache.cache.store import TargetCache
from wgradcache.cache.timings import DeviceClass
from wgradcache.cli import main
from wgradcache.pipeline.build import BuildRequest, build
from wgradcache.pipeline.tune import TuneRequest, plan_tune, tune
from wgradcache.wgrad.kernel import kernel_symbol

P = "2,32,8,8,32,1,1"
CLASS = DeviceClass("Fake H200", 132, "13000", "", "graph")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("sm90tune")
    geo = small_geometries(root)
    s = build(BuildRequest(target="sm_90", dtypes=("fp16",), geometries_file=str(geo),
                           cache_dir=str(root / "c"), jobs=1))
    assert s.failed == 0
    layers = root / "layers.yaml"
    layers.write_text(f'schema: 1\nlayers:\n  - {{name: net/a, problem: "{P}"}}\n'
                      f'  - {{name: net/b, problem: "{P}"}}\n')  # the same problem once
    return root / "c", layers


@pytest.fixture
def cache(built, tmp_path):
    shutil.copytree(built[0], tmp_path / "c")
    return tmp_path / "c"


@pytest.fixture
def fake(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(cuda_mod, "cuda_driver", lambda: fake)
    monkeypatch.setattr(timing_mod, "_bindings_version", lambda: "")
    return fake


def _tune(cache, layers, *extra):
    return CliRunner().invoke(main, ["tune", "--target", "sm_90", "--layers", str(layers),
                                     "--cache-dir", str(cache), "--top", "3", "--iters", "3",
                                     "--warmup", "1", "--spin", "0", "--batch", "1",
                                     *extra])


def test_tune_writes_a_row_per_kernel_and_select_ranks_by_them(built, cache, fake):
    req = TuneRequest("sm_90", str(built[1]), cache_dir=str(cache), top=3)
    (job,), _ = plan_tune(req)
    assert job.problem.short() == P and len(job.candidates) == 3
    # the formula's order, timed in reverse
    ms = {c.key: 0.3 - 0.1 * i for i, c in enumerate(job.candidates)}
    fake.launch_ms = {kernel_symbol(c.spec): ms[c.key] for c in job.candidates}
    r = _tune(cache, built[1], "--json", "--batch", "2")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["target"] == "sm_90" and doc["device"] == {
        "name": "Fake H200", "sm_count": 132, "driver": "13000", "runtime": "",
            "timing": "graph"}
    assert doc["failures"] == [] and doc["vendor"] == []
    got = {row["identity_key"]: row for row in doc["rows"]}
    assert set(got) == set(ms)
    for k, row in got.items():
        assert (row["problem"], row["degree"], row["iterations"], row["spread_ms"]) == (
            P, 1, 3, pytest.approx(0.0, abs=1e-12))
        assert row["median_ms"] == pytest.approx(ms[k])
    # per kernel one graph of 2 launches, replayed for 1 warm-up + 3 samples (the median
    # per launch), all on the stream tune made; nothing left allocated or undestroyed
    assert (len(fake.launches), fake.replays, len(fake.graphs)) == (3 * 4 * 2, 3 * 4, 3)
    assert len(fake.destroyed_graphs) == 3 and fake.capturing == {}
    assert set(fake.streams) == {fake.created_streams[0]}
    assert fake.destroyed_streams == fake.created_streams
    assert fake.allocations == {} and fake.retained == 0
    stored = TargetCache(cache, "sm_90").read_timings(CLASS.slug())
    assert {r.identity_key for r in stored.rows} == set(ms)
    r = CliRunner().invoke(main, ["select", "--target", "sm_90", "--problem", P,
                                  "--cache-dir", str(cache), "--json"])
    cands = json.loads(r.stdout)["candidates"]
    measured = [c["key"] for c in cands if c["cost_from"] == "measured"]
    assert measured == sorted(ms, key=ms.get)  # the reverse of the formula's order
    assert cands[:3] == [c for c in cands if c["cost_from"] == "measured"]


def test_a_killed_run_keeps_every_row_it_finished(built, cache, fake, monkeypatch):
    calls = []
    real = timing_mod.time_launches

    def dies_on_the_third(*a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(timing_mod, "time_launches", dies_on_the_third)
    req = TuneRequest("sm_90", str(built[1]), cache_dir=str(cache), top=3, warmup=0,
                      iters=1, spin_s=0)
    with pytest.raises(KeyboardInterrupt):
        tune(req)
    rows = TargetCache(cache, "sm_90").read_timings(CLASS.slug()).rows
    (job,), _ = plan_tune(req)
    assert sorted(r.identity_key for r in rows) == sorted(c.key for c in job.candidates[:2])
    assert fake.allocations == {} and fake.retained == 0


def test_a_stale_row_is_ignored_after_a_rebuild_and_tune_json_imports(built, cache, fake,
                                                                      tmp_path):
    r = _tune(cache, built[1], "--json")
    assert r.exit_code == 0, r.output
    out = tmp_path / "tuned.json"
    out.write_text(r.stdout)
    other = tmp_path / "other"
    shutil.copytree(built[0], other)
    r = CliRunner().invoke(main, ["tune", "--import", str(out), "--cache-dir", str(other),
                                  "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["added"] == 3
    assert set(TargetCache(other, "sm_90").read_timings(CLASS.slug()).rows) == \
        set(TargetCache(cache, "sm_90").read_timings(CLASS.slug()).rows)
    # the picked kernel is rebuilt into another blob: its row no longer ranks it
    c = TargetCache(cache, "sm_90")
    row = c.read_timings(CLASS.slug()).rows[0]
    entry = c.read_entry(row.identity_key)

    data = c.read_blob(entry.blob)
    ref = c.write_blob("ef" * 32, data)
    with c.lock():
        c.write_entry(replace(entry, blob=ref.key))
    r = CliRunner().invoke(main, ["select", "--target", "sm_90", "--problem", P,
                                  "--cache-dir", str(cache), "--json"])
    by_key = {x["key"]: x["cost_from"] for x in json.loads(r.stdout)["candidates"]}
    assert by_key[row.identity_key] != "measured"
    assert sum(v == "measured" for v in by_key.values()) == 2


def test_no_device_is_one_line(built, cache, monkeypatch):
    monkeypatch.setattr(cuda_mod, "cuda_driver", lambda: FakeCuda(archs=("sm_80",)))
    r = _tune(cache, built[1])
    assert r.exit_code == 2
    assert r.output == "error: tune: no sm_90 device: 1 CUDA device(s), none is sm_90\n"
    assert TargetCache(cache, "sm_90").timing_classes() == []


def test_a_layers_file_that_is_a_fifo_or_not_a_layer_set_is_one_line(cache, fake, tmp_path):
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # an open without O_NONBLOCK would wait for a writer for ever
    r = _tune(cache, fifo)
    assert (r.exit_code, r.output) == (2, f"error: --layers {fifo}: cannot read: a FIFO, not "
                                          "a regular file\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: 2\n")
    r = _tune(cache, bad)
    assert (r.exit_code, r.output) == (2, f"error: --layers {bad}: {bad}: expected 'schema: 1' "
                                          "and a 'layers' list\n")


def test_the_vendor_row_is_reported_when_adding_it_flushes(built, cache, fake, monkeypatch):
    """On the H100 (12-06) tune died with an IndexError on the first layer whose cuDNN row
    arrived after the flush interval: the writer had emptied its list before the report
    read the row back from it. Every add flushes here (flush_s=0)."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    import wgradcache.pipeline.tune as tune_mod
    from wgradcache.cache.timings import VendorRow

    stream = SimpleNamespace(cuda_stream=0x77)  # torch's stream: the session launches on it
    torch = SimpleNamespace(cuda=SimpleNamespace(Stream=lambda: stream,
                                                 stream=lambda s: nullcontext()))
    monkeypatch.setattr(tune_mod, "_cudnn", lambda req: torch)
    monkeypatch.setattr(tune_mod, "_cudnn_row", lambda t, job, req, now: VendorRow(
        "cudnn", job.problem.short(), job.dtype, 0.25, 0.0, 3, now))
    req = TuneRequest("sm_90", str(built[1]), cache_dir=str(cache), top=2, warmup=0,
                      iters=1, spin_s=0, flush_s=0.0)
    rep = tune(req)
    assert [(v.problem, v.median_ms) for v in rep.vendor] == [(P, 0.25)]
    stored = TargetCache(cache, "sm_90").read_timings(CLASS.slug())
    assert [(v.library, v.problem) for v in stored.vendor] == [("cudnn", P)]
    assert len(stored.rows) == 2


def test_a_cudnn_timing_that_fails_is_one_failure_line_and_the_rows_stay(built, cache, fake,
                                                                          monkeypatch):
    """torch's graph capture of cuDNN may refuse (a cuDNN version that cannot be captured):
    that layer has no vendor row and a failure line, and every kernel row is kept."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    import wgradcache.pipeline.tune as tune_mod

    stream = SimpleNamespace(cuda_stream=0x78)
    torch = SimpleNamespace(cuda=SimpleNamespace(Stream=lambda: stream,
                                                 stream=lambda s: nullcontext()))

    def refuses(t, job, req, now):
        raise RuntimeError("operation not permitted when stream is capturing")
    monkeypatch.setattr(tune_mod, "_cudnn", lambda req: torch)
    monkeypatch.setattr(tune_mod, "_cudnn_row", refuses)
    rep = tune(TuneRequest("sm_90", str(built[1]), cache_dir=str(cache), top=2, warmup=0,
                           iters=1, spin_s=0))
    assert rep.failures == [f"cudnn on {P} fp16: RuntimeError: operation not permitted when "
                            "stream is capturing"]
    assert rep.vendor == [] and len(rep.rows) == 2
    stored = TargetCache(cache, "sm_90").read_timings(CLASS.slug())
    assert (len(stored.rows), stored.vendor) == (2, ())


Q = "2,32,8,8,64,1,1"


def _two_layers(tmp_path):
    layers = tmp_path / "two.yaml"
    layers.write_text(f'schema: 1\nlayers:\n  - {{name: net/a, problem: "{P}"}}\n'
                      f'  - {{name: other/b, problem: "{Q}"}}\n')
    return layers


def test_a_second_tune_times_only_what_the_class_lacks(built, cache, fake, tmp_path):
    r = _tune(cache, built[1], "--json")
    assert r.exit_code == 0, r.output
    assert (len(json.loads(r.stdout)["rows"]), len(fake.launches)) == (3, 12)
    r = _tune(cache, built[1], "--json")  # every row is there: nothing is launched
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["rows"], doc["already_measured"], doc["remaining"]) == ([], 3, 0)
    assert len(fake.launches) == 12 and doc["refit"].startswith("not fitted: 3 current")
    # one kernel rebuilt into another blob: its row is stale, and only it is timed again
    c = TargetCache(cache, "sm_90")
    row = c.read_timings(CLASS.slug()).rows[0]
    entry = c.read_entry(row.identity_key)
    ref = c.write_blob("ef" * 32, c.read_blob(entry.blob))
    with c.lock():
        c.write_entry(replace(entry, blob=ref.key))
    r = _tune(cache, built[1], "--json")
    doc = json.loads(r.stdout)
    assert [(x["identity_key"], x["blob"]) for x in doc["rows"]] == [(row.identity_key,
                                                                      ref.key)]
    assert doc["already_measured"] == 2 and len(fake.launches) == 16
    r = _tune(cache, built[1], "--json", "--remeasure")
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.stdout)["rows"]) == 3 and len(fake.launches) == 28


def test_max_seconds_stops_between_kernels_and_the_next_run_goes_on(built, cache, fake,
                                                                    tmp_path, monkeypatch):
    now = [0.0]
    real = timing_mod.time_launches

    def ten_seconds_each(*a, **kw):
        now[0] += 10.0
        return real(*a, **kw)

    monkeypatch.setattr(timing_mod, "time_launches", ten_seconds_each)
    req = TuneRequest("sm_90", str(_two_layers(tmp_path)), cache_dir=str(cache), top=3,
                      warmup=0, iters=1, spin_s=0, max_seconds=15)
    jobs, _ = plan_tune(req)
    assert [(j.problem.short(), len(j.candidates)) for j in jobs] == [(P, 3), (Q, 3)]
    rep = tune(req, clock=lambda: now[0])
    # 0 s: the first kernel; 10 s: the second; 20 s, past 15: stop before the third
    assert [r.identity_key for r in rep.rows] == [c.key for c in jobs[0].candidates[:2]]
    assert (rep.remaining, rep.remaining_layers) == (4, 2)
    assert rep.left_line() == ("stopped by --max-seconds: 4 kernel timings of 2 (layer, "
                               "dtype) pairs remain; the same command goes on where this "
                               "one stopped")
    stored = TargetCache(cache, "sm_90").read_timings(CLASS.slug()).rows
    assert len(stored) == 2
    rep = tune(replace(req, max_seconds=None), clock=lambda: now[0])
    assert (rep.already, rep.remaining, rep.left_line()) == (2, 0, "")
    assert [r.identity_key for r in rep.rows] == [c.key for c in jobs[0].candidates[2:]] + [
        c.key for c in jobs[1].candidates]


def test_max_seconds_zero_times_nothing_and_says_what_is_left(built, cache, fake, tmp_path):
    two = _two_layers(tmp_path)
    r = _tune(cache, two, "--max-seconds", "0")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[-1] == (
        "stopped by --max-seconds: 6 kernel timings of 2 (layer, dtype) pairs remain; the "
        "same command goes on where this one stopped")
    assert fake.launches == []
    r = _tune(cache, two, "--json")
    assert (len(json.loads(r.stdout)["rows"]), json.loads(r.stdout)["remaining"]) == (6, 0)


def test_layer_and_network_pick_the_layers_timed(built, cache, fake, tmp_path):
    two = _two_layers(tmp_path)
    for args in (("--layer", "other/b"), ("--network", "other")):
        req_rows = json.loads(_tune(cache, two, "--json", "--remeasure", *args).stdout)["rows"]
        assert {x["problem"] for x in req_rows} == {Q}
    r = _tune(cache, two, "--layer", "net/zz")
    assert (r.exit_code, r.output) == (2, f"error: --layer 'net/zz': no layer of {two} is "
                                          "named so\n")
    r = _tune(cache, two, "--network", "../x")
    assert (r.exit_code, r.output) == (2, f"error: --network '../x': no layer of {two} is "
                                          "in it (NET/...); its networks: net, other\n")


def test_a_corrupt_class_file_is_one_line_and_left_alone(built, cache, fake):
    c = TargetCache(cache, "sm_90")
    path = c.timings_path(CLASS.slug())
    path.parent.mkdir(exist_ok=True)
    path.write_text('{"device": NaN}')
    r = _tune(cache, built[1])
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert r.output.startswith(f"error: tune: {path}: ") and r.output.endswith(
        "(`wgradcache verify` reports it; move it away to start the class afresh)\n")
    assert path.read_text() == '{"device": NaN}' and fake.launches == []
