"""``verify``'s reproduce level: compile each stored kernel's job again and require the
stored blob byte for byte.

Builds are byte-deterministic (the same IR, target, codegen options and toolchain give the
same code object: tested across the three codegen backends and both linkers), so the
compile of an entry's IR that is not its stored blob is a finding: a blob swapped for
other bytes (whatever its entry records), or a non-deterministic build. The job is emitted
and compiled as the build does it (``workers.reproduce_task``: loky worker processes, a
job LLVM kills retried alone in an isolated child), with the kernel named as the stored
binary names it (a blob two identities share was compiled under the first one's name;
structure has checked that name). Stage-2 companions are reproduced too.

An entry built with another toolchain or other codegen options than this machine's
cannot be reproduced here: that is a failure naming the difference (``wgradcache build``
rebuilds it), never a pass. The IR's content key is compared first: an entry whose
re-emitted IR hashes to another key is "not this IR" without a compile.

Cost: one compile per entry, ~0.1-0.3 s of CPU (the build's), spread over the cores.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from wgradcache.model.spec import KernelSpec
from wgradcache.pipeline.workers import ReproduceResult, Stage2Job

__all__ = ["StoredKernel", "reproduce_all"]


@dataclass(frozen=True)
class StoredKernel:
    """One stored kernel to reproduce, as verify read it: its key, its job, the symbol and
    content key its entry records, the stored bytes, and what it was built with."""

    key: str
    job: KernelSpec | Stage2Job
    symbol: str
    ckey: str
    stored: bytes
    toolchain_digest: str
    codegen_options: dict | None  # None: a stage-2 record, which keeps none


def _first_difference(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                min(len(a), len(b)))


def _judge(res: ReproduceResult, k: StoredKernel) -> str:
    if res.error:
        return f"could not compile its IR again: {res.error}"
    if res.ckey != k.ckey:
        return ("the stored binary is not this IR: re-emitted IR hashes to another "
                "content key")
    new, stored = res.blob or b"", k.stored
    if new != stored:
        return (f"the compile of its IR is not the stored blob: {len(new)} bytes against "
                f"{len(stored)} stored, first difference at byte "
                f"{_first_difference(new, stored)}")
    return ""


def reproduce_all(target: str, kernels: list[StoredKernel], jobs_n: int = 0,
                  on_done: Callable[[str, str], None] | None = None) -> dict[str, str]:
    """Compile each of ``kernels`` again. Returns key -> "" (reproduced) or the reason;
    ``on_done(key, reason)`` as each settles."""
    from wgradcache.compile.preflight import require_tools
    from wgradcache.pipeline.workers import ReproduceJob, RunOptions, codegen_context, run_chunked

    require_tools([target])  # before the first job: a missing tool is not a failed entry
    options, toolchain, tdigest = codegen_context(target)
    out: dict[str, str] = {}
    on_done = on_done or (lambda k, r: None)
    expect: dict[str, StoredKernel] = {}
    tasks = []
    for k in kernels:
        if k.toolchain_digest != tdigest or (k.codegen_options is not None
                                             and k.codegen_options != options):
            out[k.key] = ("built with another toolchain or other codegen options than this "
                          "machine's: its compile cannot be reproduced here (`wgradcache "
                          "build` rebuilds it)")
            on_done(k.key, out[k.key])
            continue
        expect[k.key] = k
        tasks.append(ReproduceJob(k.key, k.job, k.symbol, options, toolchain))

    def take(res: ReproduceResult) -> None:
        out[res.key] = _judge(res, expect[res.key])
        on_done(res.key, out[res.key])

    run_chunked(tasks, RunOptions(n_jobs=jobs_n or os.cpu_count() or 1), take)
    return out
