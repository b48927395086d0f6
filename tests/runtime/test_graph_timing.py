"""Timing by graph replay (runtime/cuda.CudaSession.capture, runtime/timing.time_launches)
on the fake driver: what a capture records is not run until a replay, each replay runs all
of it, the NULL stream is refused, and a failure inside a capture leaves no capture open."""

from __future__ import annotations

import numpy as np
import pytest
from fake_cuda import FakeCuda

import wgradcache.runtime.cuda as cuda_mod
from wgradcache.runtime.cuda import CudaSession, device_for
from wgradcache.runtime.timing import time_launches


@pytest.fixture
def fake(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(cuda_mod, "cuda_driver", lambda: fake)
    return fake


def _read(s: CudaSession, addr: int) -> list[int]:
    out = np.zeros(8, np.uint8)
    s.synchronize()
    s.download(addr, out)
    return out.tolist()


def test_a_capture_runs_nothing_until_replayed_and_each_replay_runs_it_all(fake):
    dev, _ = device_for("sm_90")
    with CudaSession(dev, stream=None) as s:
        assert s.stream == fake.created_streams[0]
        addr = s.alloc(8)
        s.upload(addr, np.full(8, 7, np.uint8))
        calls = []

        def run():
            calls.append(1)
            s.memset(addr, len(calls), 8)
        g = s.capture(run, 3)
        assert (len(calls), _read(s, addr)) == (3, [7] * 8)  # recorded, not run
        s.replay(g)
        assert _read(s, addr) == [3] * 8  # the three memsets in order: the last one wins
        s.upload(addr, np.zeros(8, np.uint8))
        s.replay(g)
        assert (_read(s, addr), fake.replays) == ([3] * 8, 2)
        s.release(g)
        assert fake.destroyed_graphs == [("exec", 0)]
    assert fake.destroyed_streams == fake.created_streams


def test_the_null_stream_is_refused_and_a_failed_capture_is_closed(fake):
    dev, _ = device_for("sm_90")
    with CudaSession(dev) as s:  # the legacy default stream
        with pytest.raises(ValueError, match=r"a graph needs a stream of its own: the "
                                             r"session runs on the legacy default stream"):
            s.capture(lambda: None, 1)
    with CudaSession(dev, stream=None) as s:
        def boom():
            raise RuntimeError("launch failed")
        with pytest.raises(RuntimeError, match="launch failed"):
            s.capture(boom, 2)
        assert fake.capturing == {}  # the stream is usable again
        g = s.capture(lambda: None, 1)
        s.replay(g)  # left to close
    assert fake.destroyed_graphs == [("exec", 1)]


def test_time_launches_samples_one_replay_each_and_releases_its_graph(fake):
    dev, _ = device_for("sm_90")
    with CudaSession(dev, stream=None) as s:
        addr = s.alloc(8)
        t = time_launches(s, lambda: s.memset(addr, 1, 8), warmup=2, iters=5, batch=4)
        assert (t.iterations, fake.replays, len(fake.graphs)) == (5, 7, 1)
        assert fake.destroyed_graphs == [("exec", 0)] and t.spread_ms == 0.0


def test_torch_graph_samples_captures_once_and_times_each_replay():
    """cuDNN's side (tune's vendor row, device_speed.py): eager calls before the capture,
    ``batch`` calls captured on the stream given, ``warmup`` untimed replays, then one
    replay a sample, per call, ascending."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from wgradcache.runtime.timing import torch_graph_samples

    log, clock = [], [0.0]
    replay_ms = iter([8.0, 4.0, 6.0, 2.0, 10.0, 12.0])  # 2 warm-up replays, then 4 samples

    class Graph:
        def replay(self):
            log.append("replay")
            clock[0] += next(replay_ms)

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing

        def record(self, stream):
            assert stream is side
            self.at = clock[0]

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return end.at - self.at

    @contextmanager
    def graph(g, stream):
        assert stream is side
        log.append("begin")
        yield
        log.append("end")

    side = SimpleNamespace(synchronize=lambda: log.append("sync"))
    torch = SimpleNamespace(cuda=SimpleNamespace(CUDAGraph=Graph, graph=graph, Event=Event))
    times = torch_graph_samples(torch, side, lambda: log.append("run"), 2, 4, 2)
    assert log == ["run", "run", "sync", "begin", "run", "run", "end"] + ["replay"] * 6
    assert times == [1.0, 3.0, 5.0, 6.0]  # 6, 2, 10, 12 ms over 2 calls, ascending
