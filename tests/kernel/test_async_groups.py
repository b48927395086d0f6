"""cp.async's groups (``ASYNC_COMMIT``, ``ASYNC_WAIT_GROUP``): what the deeper async ring
waits with on NVIDIA. In the emulator each lane's copies join its open group, a commit
closes it, and wait_group n lands every group but the lane's n newest committed ones (the
open group not at all); the lowering is cp.async.commit_group / wait_group n, and the AMD
lowering refuses both."""

from __future__ import annotations

import numpy as np
import pytest

from wgradcache.kernel.builder import BuildError, KernelBuilder
from wgradcache.kernel.emulate import EmulationError, emulate
from wgradcache.kernel.ir import i8, ptr
from wgradcache.kernel.lower import LoweringError, lower

LANES = 32
TILES = 3  # copies, one group each unless told


def ring_kernel(wait: int, read: int, *, commit_last: bool = True, empty: int = 0):
    """Each lane copies 4 bytes of tile j (j < TILES) of g into slot j of its own LDS run,
    committing a group after each (``empty`` extra empty groups after the last; the last
    not committed where ``commit_last`` is False), waits for groups with ``wait``, then
    reads slot ``read`` of its own run (no barrier needed: its own bytes) into o."""
    kb = KernelBuilder("g", LANES)
    g, o = kb.arg("g", ptr(i8)), kb.arg("o", ptr(i8))
    buf = kb.lds("t", LANES * 4 * TILES, elem=i8)
    t = kb.thread_id()
    keep = kb.icmp("sge", t, 0)
    for j in range(TILES):
        at = kb.add(kb.mul(t, 4 * TILES), 4 * j)
        kb.async_copy_zfill(kb.gep(g, kb.add(kb.mul(t, 4), j * LANES * 4)), kb.gep(buf, at), 4,
                            keep)
        if j < TILES - 1 or commit_last:
            kb.async_commit()
    for _ in range(empty):
        kb.async_commit()
    kb.async_wait_group(wait)
    at = kb.add(kb.mul(t, 4 * TILES), 4 * read)
    kb.store(kb.gep(o, kb.mul(t, 4)), kb.load(kb.gep(buf, at), 4), align=4)
    kb.async_wait(0)  # the rest, before the kernel ends
    return kb.finish()


def _run(kd):
    g = (np.arange(TILES * LANES * 4) % 251 + 1).astype(np.uint8)
    o = np.zeros(LANES * 4, np.uint8)
    emulate(kd, (1, 1, 1), {"g": g, "o": o})
    return g.reshape(TILES, LANES * 4), o


@pytest.mark.parametrize("wait, newest_landed", [(0, 2), (1, 1), (2, 0)])
def test_wait_group_n_lands_all_but_the_n_newest_groups(wait, newest_landed):
    """Three groups in flight: wait_group n lands groups 0 .. 2-n; reading the newest
    landed one is clean and gives its bytes, reading the next one is a read in flight."""
    g, o = _run(ring_kernel(wait, newest_landed))
    np.testing.assert_array_equal(o, g[newest_landed])
    if newest_landed < TILES - 1:
        with pytest.raises(EmulationError, match=r"reads byte \d+ of LDS 't' while an async "
                                                 r"copy of lane 0 into it is in flight"):
            _run(ring_kernel(wait, newest_landed + 1))


def test_the_open_group_is_not_waited_for_and_empty_groups_count():
    """A copy not yet committed stays in flight through wait_group 0; empty commits are
    groups (CUTLASS's ring commits one a K step, copies or not): two of them after the last
    tile make wait_group 2 land it."""
    with pytest.raises(EmulationError, match="in flight"):
        _run(ring_kernel(0, TILES - 1, commit_last=False))
    g, o = _run(ring_kernel(0, TILES - 2, commit_last=False))
    np.testing.assert_array_equal(o, g[TILES - 2])
    g, o = _run(ring_kernel(2, TILES - 1, empty=2))
    np.testing.assert_array_equal(o, g[TILES - 1])


def test_groups_are_per_lane():
    """Lane 0 commits nothing: its copy stays open, so its wait_group retires nothing and
    lane 0's read of it is in flight, whatever the other lanes of its warp did."""
    kb = KernelBuilder("p", LANES)
    g, o = kb.arg("g", ptr(i8)), kb.arg("o", ptr(i8))
    buf = kb.lds("t", LANES * 4, elem=i8)
    t = kb.thread_id()
    kb.async_copy_zfill(kb.gep(g, kb.mul(t, 4)), kb.gep(buf, kb.mul(t, 4)), 4,
                        kb.icmp("sge", t, 0))
    with kb.if_(kb.icmp("ne", t, 0)):
        kb.async_commit()
    kb.async_wait_group(0)
    kb.store(kb.gep(o, kb.mul(t, 4)), kb.load(kb.gep(buf, kb.mul(t, 4)), 4), align=4)
    kb.async_wait(0)
    with pytest.raises(EmulationError, match="async copy of lane 0 into it is in flight"):
        emulate(kb.finish(), (1, 1, 1), {"g": np.zeros(128, np.uint8),
                                         "o": np.zeros(128, np.uint8)})


def test_lowering_and_the_builders_bound():
    text = lower(ring_kernel(1, 1), "sm_90")
    assert text.count('call void @"llvm.nvvm.cp.async.commit.group"()') == TILES
    assert 'call void @"llvm.nvvm.cp.async.wait.group"(i32 1)' in text
    for op in ("async_commit", "async_wait_group"):
        kb = KernelBuilder("a", 32)
        getattr(kb, op)(*(() if op == "async_commit" else (1,)))
        with pytest.raises(LoweringError, match="cp.async groups are NVIDIA's: gfx1250 waits "
                                                "for a count of its copies"):
            lower(kb.finish(), "gfx1250")
    with pytest.raises(BuildError, match=r"async_wait_group\(64\)"):
        KernelBuilder("b", 32).async_wait_group(64)


def test_ptxas_makes_the_scoreboard_wait_of_it():
    from wgradcache.compile.codegen import compile_ir
    from wgradcache.model.backends import backend_of

    obj = compile_ir(lower(ring_kernel(1, 1), "sm_90"), "sm_90")
    # a commit per tile, and the wait for all at the end: commit_group + wait_group 0
    assert "DEPBAR.LE SB0, 0x1 ;" in obj.asm and obj.asm.count("LDGDEPBAR") == TILES + 1
    assert backend_of("sm_90").isa_stats(obj.asm, obj.listing)["async_waits"] == TILES + 1 + 2
