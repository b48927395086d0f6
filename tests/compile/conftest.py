"""Shared fixtures: one in-process compile per (IR, target, listing) for the whole session;
labels built one by one into a cache and read back (the direct kernels' object tests)."""

from __future__ import annotations

import functools

import pytest

from wgradcache.cache.entry import record_json
from wgradcache.cache.store import TargetCache
from wgradcache.compile.codegen import CodegenOptions, CompiledObject, compile_ir
from wgradcache.model.backends import backend_of
from wgradcache.model.spec import KernelSpec, from_label
from wgradcache.pipeline.build import BuildRequest, build


@functools.cache
def _compile(ir: str, target: str, listing: str, features: str) -> CompiledObject:
    return compile_ir(ir, target, CodegenOptions(features=features), listing=listing)


@pytest.fixture(scope="session")
def compiled():
    """compiled(ir, target, listing="auto", features="") -> CompiledObject, memoised."""

    def get(ir: str, target: str, listing: str = "auto", features: str = "") -> CompiledObject:
        return _compile(ir, target, listing, features)

    return get


def built_entries(root, labels: tuple[str, ...]) -> list[tuple[KernelSpec, dict, object]]:
    """Each label built on its own into the cache at ``root`` (none may fail): (its spec, its
    entry as JSON, its code object as its backend reads the stored blob)."""
    out: list[tuple[KernelSpec, dict, object]] = []
    for label in labels:
        spec = from_label(label)
        summary = build(BuildRequest(target=spec.target, cache_dir=str(root), jobs=1),
                        specs=[spec])
        assert summary.failed == 0, summary.failures
        cache = TargetCache(root, spec.target)
        held = [e for _, e in cache.iter_entries()]  # one entry per label of the target
        assert len(held) == 1 + sum(s.target == spec.target for s, _, _ in out), label
        (e,) = [e for e in held if e.label == label]
        info = backend_of(spec.target).read_code_object(cache.read_blob(e.blob))
        out.append((spec, record_json(e), info))
    return out
