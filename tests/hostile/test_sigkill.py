"""SIGKILL of the build coordinator at random moments: what it published is whole, no
two-stage entry is without its stage-2 kernel, and none of its processes outlives it.

Only the coordinator is killed (not its process group), as an OOM killer or a CI runner's
timeout does: its loky workers, their resource tracker and the codegen children of the
stage-2 kernels must then end by themselves. They are found by an environment variable
the test sets on the build, which every descendant inherits.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from wgradcache.cache.entry import Entry, Stage2Entry
from wgradcache.cache.gc import GcOptions, gc
from wgradcache.cache.store import TargetCache, sha256_bytes, stage2_name
from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.verify import VerifyRequest, verify

_MARKER = "WGRADCACHE_SIGKILL_TRIAL"
# one small geometry, a split-K variant of each kind: 4 atomic + 4 two-stage jobs and one
# stage-2 kernel, ~4 s on a quiet machine (13 builds in all)
_JOBS = ["--target", "gfx1250", "--dtype", "fp16", "--geometry", "t32x32x32-w1x1",
         "--variant", "sync.default.two_stage", "--variant", "sync.default.atomic",
         "--jobs", "2", "--json"]
_SEED = 16


def _start(cache_dir: Path, token: str) -> subprocess.Popen:
    """The build, its output in files beside the cache: a pipe would stay open as long as
    any descendant lives, and reading it to the end would wait for the orphans."""
    env = {**os.environ, _MARKER: token}
    with open(f"{cache_dir}.out", "wb") as out, open(f"{cache_dir}.err", "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "wgradcache", "build", *_JOBS,
                                 "--cache-dir", str(cache_dir)], env=env,
                                stdout=out, stderr=err)


def _finish(proc: subprocess.Popen, cache_dir: Path) -> dict:
    """Wait for a build that is not killed; its summary."""
    assert proc.wait(timeout=600) == 0, Path(f"{cache_dir}.err").read_text()
    return json.loads(Path(f"{cache_dir}.out").read_text())


def _marked(token: str) -> dict[int, str]:
    """Live (not zombie) processes whose environment holds our marker: pid -> cmdline."""
    needle = f"{_MARKER}={token}".encode()
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
            stat = Path(f"/proc/{name}/stat").read_text()
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        state = stat.rsplit(")", 1)[1].split()[0]
        if needle in environ.split(b"\0") and state != "Z":
            found[int(name)] = cmd.replace(b"\0", b" ").decode(errors="replace")[:120]
    return found


def _survivors(token: str, grace: float = 30.0) -> dict[int, str]:
    """The marked processes still alive after ``grace`` seconds (they are killed then, by
    pid, so one failed trial does not load the machine for the next)."""
    deadline = time.monotonic() + grace
    while (left := _marked(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def _findings(cache_dir: Path) -> list[str]:
    """Integrity findings other than orphan blobs and temporary files, and two-stage
    entries whose stage-2 record is missing or not whole. An orphan blob is what a kill
    between a blob and its entry leaves: harmless (the next build relinks it, ``gc
    --orphans`` removes it), and checked to be adopted by the resumed build; a temporary
    file is what a kill between a write's create and its rename leaves (verify counts it,
    gc removes it past its grace: checked on the resumed cache)."""
    rep = verify(VerifyRequest(cache_dir=str(cache_dir), targets=("gfx1250",),
                               level="integrity"))
    out = [f"{f.label or f.key[:16]}: {f.reason}" for f in rep.failures
           if not f.reason.startswith(("orphan blob", "temporary file of an unfinished"))]
    cache = TargetCache(cache_dir, "gfx1250")
    for _, e in cache.iter_entries():
        if not isinstance(e, Entry) or "two_stage" not in e.variant:
            continue
        spec = KernelSpec.from_dict(e.identity)
        s2 = cache.read_stage2(stage2_name(spec.dw_dtype, spec.ws_replicas))
        if not isinstance(s2, Stage2Entry):
            out.append(f"{e.label}: published without its stage-2 record")
            continue
        data = cache.read_blob(s2.blob)
        if len(data) != s2.blob_size or sha256_bytes(data) != s2.blob_sha256:
            out.append(f"{e.label}: its stage-2 blob is not whole")
    return out


def _warm(tmp: Path) -> int:
    """One whole build first: the native helper is built (a cold one compiles with c++ for
    seconds), and the job set is what the trials expect. Returns its entry count."""
    cache_dir = tmp / "warm"
    summary = _finish(_start(cache_dir, "warm"), cache_dir)
    assert (summary["built"], summary["failed"], summary["stage2_failed"]) == (8, 0, 0)
    return summary["jobs"]


def _moments() -> list[tuple[str, float, float]]:
    """Seeded kill moments as (trigger, value, then wait s), spread over the build:
    start-up (a time), after k entries are published, and on the stage-2 record's
    appearance: the moment its held two-stage entries are being published."""
    rng = random.Random(_SEED)
    out = [("time", rng.uniform(0.1, 1.5), 0.0) for _ in range(3)]
    out += [("entries", rng.randint(1, 7), rng.uniform(0.0, 0.05)) for _ in range(6)]
    out += [("stage2", 0, wait) for wait in (0.0, 0.003, rng.uniform(0.005, 0.03))]
    return out


def _fired(trigger: str, value: float, cache: TargetCache, t0: float) -> bool:
    if trigger == "time":
        return time.monotonic() - t0 >= value
    if trigger == "entries":
        return len(cache.entry_keys()) >= value
    return (cache.dir / "stage2").is_dir() and any((cache.dir / "stage2").glob("*.json"))


def _kill_when(proc: subprocess.Popen, cache_dir: Path, trigger: str, value: float,
               wait: float) -> bool:
    """SIGKILL the coordinator alone once ``trigger`` fires (plus ``wait``); whether it
    was still running then."""
    cache, t0 = TargetCache(cache_dir, "gfx1250"), time.monotonic()
    while not _fired(trigger, value, cache, t0) and proc.poll() is None:
        time.sleep(0.002)
    time.sleep(wait)
    alive = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return alive


def test_sigkill_at_random_moments_leaves_a_whole_cache_and_no_process(tmp_path):
    jobs = _warm(tmp_path)
    problems: list[str] = []
    killed: list[Path] = []  # trials that killed a running build and left something
    live = 0
    for n, (trigger, value, wait) in enumerate(_moments()):
        cache_dir = tmp_path / f"trial{n}"
        token = uuid.uuid4().hex
        live += _kill_when(_start(cache_dir, token), cache_dir, trigger, value, wait)
        where = f"trial {n} (killed on {trigger} {value:g} + {wait * 1000:.0f} ms)"
        problems += [f"{where}: left running: {cmd}" for cmd in _survivors(token).values()]
        problems += [f"{where}: {f}" for f in _findings(cache_dir)]
        if TargetCache(cache_dir, "gfx1250").entry_keys():
            killed.append(cache_dir)
    assert problems == []
    assert live >= 10  # the moments are before the build's end, even on a busy machine
    # The last trial that had published something resumes: its job set is then complete,
    # nothing is orphaned, and no entry it already had is compiled again.
    resume = killed[-1]
    had = len(TargetCache(resume, "gfx1250").entry_keys())
    assert _finish(_start(resume, "resume"), resume)["up_to_date"] == had
    gc(TargetCache(resume, "gfx1250"), None, GcOptions(stale=False, orphans=False, grace=0.0))
    rep = verify(VerifyRequest(cache_dir=str(resume), targets=("gfx1250",),
                               level="integrity"))
    assert (rep.failures, rep.targets["gfx1250"]["entries"]) == ([], jobs)


_GRANDCHILD = """
import os, sys, time
from wgradcache.compile import lifetime
if sys.argv[1] == "watchdog":
    lifetime._pdeathsig = lambda: False  # as on a platform without prctl
lifetime.end_with_parent(os.getppid())
print("ready", flush=True)
time.sleep(120)
"""
# the parent starts the grandchild, says its pid, and waits to be killed
_CHILD = """
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE)
g.stdout.readline()
print(g.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("mechanism", ["pdeathsig", "watchdog"])
def test_a_process_that_ends_with_its_parent_does(mechanism):
    """``end_with_parent``: prctl's parent-death signal, and the polling thread used where
    prctl is not available; the grandchild outlives its killed parent by at most seconds."""
    token = uuid.uuid4().hex
    child = subprocess.Popen([sys.executable, "-c", _CHILD, _GRANDCHILD, mechanism],
                             stdout=subprocess.PIPE, env={**os.environ, _MARKER: token})
    grandchild = int(child.stdout.readline())
    assert grandchild in _marked(token)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert _survivors(token) == {}
