"""Confirm the catalog's LDS limit of a target on this machine's LLVM.

``targets.Target.lds_bytes`` comes from a probe (llvm22-amdgpu-facts.md §4); this re-runs
it: a kernel allocating exactly the limit must compile with that group segment, and one 4
bytes over must be refused by LLVM ("exceeds limit", which exits the process, hence
``compile_isolated``). If an LLVM update moves a limit, the test of this probe says so.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from wgradcache.compile.codegen import CodegenOptions
from wgradcache.compile.isolate import compile_isolated
from wgradcache.compile.samples import lds_kernel
from wgradcache.model.targets import get_target

__all__ = ["LdsProbe", "probe_lds_limit"]

_STEP = 4  # LDS is allocated in dwords; the facts' binary search used 4-byte steps


@dataclass(frozen=True)
class LdsProbe:
    target: str
    limit: int  # the catalog's lds_bytes
    at_limit_group_segment: int  # .group_segment_fixed_size at the limit; -1 if it failed
    at_limit_error: str
    over_limit_ok: bool  # True would mean the catalog's limit is too small
    over_limit_error: str

    @property
    def confirmed(self) -> bool:
        return (self.at_limit_group_segment == self.limit and not self.over_limit_ok
                and "exceeds limit" in self.over_limit_error)


def probe_lds_limit(target: str, options: CodegenOptions | None = None,
                    timeout: float = 300) -> LdsProbe:
    """Compile ``lds_bytes`` and ``lds_bytes + 4`` of LDS for ``target``, both isolated."""
    limit = get_target(target).lds_bytes
    with ThreadPoolExecutor(2) as pool:
        at, over = pool.map(
            lambda n: compile_isolated(lds_kernel(n), target, options, timeout,
                                       listing="none"),
            (limit, limit + _STEP))
    return LdsProbe(
        target=target,
        limit=limit,
        at_limit_group_segment=at.obj.info.static_lds_bytes if at.ok else -1,
        at_limit_error=at.error,
        over_limit_ok=over.ok,
        over_limit_error=over.error,
    )
