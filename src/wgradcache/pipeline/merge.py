"""``merge`` with this tool's current digests: what decides which of two builds of one
identity supersedes (``cache/merge.py``). They live here, not in ``cache/``, because the
generator digest is ``wgrad/``'s and the toolchain digest ``compile/``'s."""

from __future__ import annotations

from pathlib import Path

from wgradcache.cache.merge import Digests, MergeReport, merge

__all__ = ["current_digests", "merge_shards"]


def current_digests() -> Digests:
    """The generator digest and the toolchain digest a build here would record. Without a
    toolchain (a machine that only merges) the toolchain digest is None: a merge still
    unions shards, and other content for one identity is then a conflict. A target with a
    toolchain of its own (sm_90: ptxas) gets its own digest, None where that is missing."""
    from wgradcache.model.backends import backend_of
    from wgradcache.model.targets import TARGETS
    from wgradcache.wgrad.emit import generator_digest

    own = tuple((t, _toolchain_digest(t)) for t in sorted(TARGETS)
                if backend_of(t).own_toolchain)
    return Digests(generator=generator_digest(), toolchain=_toolchain_digest(None),
                   by_target=own)


def _toolchain_digest(target: str | None) -> str | None:
    from wgradcache.compile.toolchain import ToolchainError
    from wgradcache.pipeline.workers import codegen_context

    try:
        return codegen_context(target)[2]
    except ToolchainError:
        return None


def merge_shards(sources: list[str | Path], dest: str | Path) -> MergeReport:
    """Union the shard caches ``sources`` into ``dest``; a record built by this generator
    and toolchain supersedes one built by an older one."""
    return merge(sources, dest, current=current_digests())
