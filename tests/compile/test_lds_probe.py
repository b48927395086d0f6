"""targets.py's LDS limits hold on this machine's LLVM (facts §4), for every AMD target
(sm_90's 48 KB static limit is ptxas's: tests/compile/test_sm90.py)."""

from __future__ import annotations

import pytest

from wgradcache.compile.probe import probe_lds_limit
from wgradcache.model.targets import get_target, target_names


@pytest.mark.parametrize("target", [t for t in target_names() if get_target(t).backend == "amdgpu"])
def test_lds_limit(target):
    limit = get_target(target).lds_bytes
    probe = probe_lds_limit(target)
    assert probe.limit == limit
    assert probe.at_limit_error == ""
    assert probe.at_limit_group_segment == limit
    assert not probe.over_limit_ok
    assert (f"local memory ({limit + 4}) exceeds limit ({limit}) in function 'k'"
            in probe.over_limit_error)
    assert probe.over_limit_error.startswith("codegen process exited with status 1")
    assert probe.confirmed
