"""Shared fixtures: one in-process compile per (IR, target, listing) for the whole session."""

from __future__ import annotations

import functools

import pytest

from wgradcache.compile.codegen import CodegenOptions, CompiledObject, compile_ir


@functools.cache
def _compile(ir: str, target: str, listing: str, features: str) -> CompiledObject:
    return compile_ir(ir, target, CodegenOptions(features=features), listing=listing)


@pytest.fixture(scope="session")
def compiled():
    """compiled(ir, target, listing="auto", features="") -> CompiledObject, memoised."""

    def get(ir: str, target: str, listing: str = "auto", features: str = "") -> CompiledObject:
        return _compile(ir, target, listing, features)

    return get
