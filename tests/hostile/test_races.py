"""A folder of the cache swapped for a symlink while a run removes or writes in it.

The attacker has write access to the cache directory: once gc or a build has checked the
layout, it renames ``<target>/entries`` away and puts a symlink to another folder in its
place, as soon as the run starts removing (gc) or writing (build). A real concurrent swap:
a thread polls the folder and swaps the moment the first file goes or comes; the trial is
repeated until the swap lands while the run still works in the folder. Every trial asserts
the other folder byte for byte unchanged; a trial whose swap landed in time asserts the run
stopped with one line naming the folder, exit 1.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.hostile.conftest import tree
from wgradcache.cli import main

T = "gfx1250"
TRIALS = 25
MOVED = ("was replaced while this run used it (a symlink or another folder is there now): "
         "stopped, nothing written or removed through it")


class Swapper(threading.Thread):
    """Swaps ``folder`` for a symlink to ``other`` as soon as ``when()`` holds."""

    def __init__(self, folder: Path, other: Path, when: Callable[[], bool]):
        super().__init__(daemon=True)
        self.folder, self.other, self.when = folder, other, when
        self.done = threading.Event()
        self.landed = False

    def run(self) -> None:
        while not self.done.is_set():
            try:
                ready = self.when()
            except OSError:
                ready = False
            if ready:
                os.rename(self.folder, self.folder.with_name("entries.moved"))
                os.symlink(self.other, self.folder)
                self.landed = True
                return

    def finish(self) -> None:
        self.done.set()
        self.join()


@pytest.fixture
def fast_switch():
    """Hand the interpreter between the run and the swapper often: more interleavings."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def _trial(tmp: Path, n: int, small_cache: dict, prepare: Callable[[Path], None],
           when: Callable[[Path, int], bool], args: list[str]):
    """One run with the swapper armed, which swaps once ``when(entries, files at the
    start)`` holds: (result, swapped?, the other folder's trees before and after, the
    entries path)."""
    root = tmp / f"t{n}"
    cache = root / "cache"
    shutil.copytree(small_cache["cache"], cache, symlinks=True)
    entries = cache / T / "entries"
    prepare(entries)
    other = root / "other"
    shutil.copytree(entries, other)  # the same names: a path-based unlink would hit them
    (other / "secret.txt").write_bytes(b"the deploy key\n")
    before = tree(other)
    n0 = len(os.listdir(entries))
    swapper = Swapper(entries, other, lambda: when(entries, n0))
    swapper.start()
    try:
        r = CliRunner().invoke(main, [*args, "--cache-dir", str(cache)])
    finally:
        swapper.finish()
    return r, swapper.landed, before, tree(other), entries


def _plant_corrupt(entries: Path, n: int = 100) -> None:
    """Entries gc removes one by one (not whole JSON), so its removals span some time."""
    for i in range(n):
        (entries / f"{i:064x}.json").write_bytes(b"{not json")


def test_gc_stops_when_entries_is_swapped_for_a_link_and_deletes_nothing_outside(
        small_cache, tmp_path, fast_switch):
    stopped = 0
    for n in range(TRIALS):
        r, landed, before, after, entries = _trial(
            tmp_path, n, small_cache, _plant_corrupt, lambda e, n0: len(os.listdir(e)) < n0,
            ["gc", "--max-size", "1", "--geometries", str(small_cache["geometries"])])
        assert after == before, f"trial {n}: gc removed files of the other folder"
        if landed and r.exit_code == 1:
            assert r.stderr.splitlines() == [f"failed: {entries}: {MOVED}"], r.output
            stopped += 1
            if stopped == 3:
                break
        else:
            assert r.exit_code == 0, r.output
    assert stopped, f"the swap never landed while gc ran ({TRIALS} trials)"


def test_build_stops_when_entries_is_swapped_for_a_link_and_writes_nothing_outside(
        small_cache, tmp_path, fast_switch):
    """Every entry gone, the blobs kept: the build relinks and writes all 18 entries."""
    def empty(entries: Path) -> None:
        for f in entries.iterdir():
            f.unlink()

    stopped = 0
    for n in range(TRIALS):
        r, landed, before, after, entries = _trial(
            tmp_path, n, small_cache, empty, lambda e, n0: len(os.listdir(e)) > n0,
            ["build", "--target", T, "--geometries", str(small_cache["geometries"]),
             "--dtype", "fp16", "--dtype", "bf16", "--limit", "18", "--json"])
        assert after == before, f"trial {n}: the build wrote into the other folder"
        if landed and r.exit_code == 1:
            [line] = r.stderr.splitlines()
            doc = json.loads(r.stdout.strip().splitlines()[-1])
            jobs = doc["stopped_jobs"]
            assert jobs and line == (
                f"failed: {T}: the cache cannot be written (CacheMoved: {entries}: {MOVED}): "
                f"{jobs} job(s) not published, nothing half-written; the next build "
                "compiles them"), r.output
            stopped += 1
            if stopped == 3:
                break
        else:
            assert r.exit_code == 0, r.output
    assert stopped, f"the swap never landed while the build wrote ({TRIALS} trials)"
