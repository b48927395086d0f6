"""read_code_object on real code objects and on inputs that are not one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from wgradcache.compile.codeobject import read_code_object
from wgradcache.compile.samples import lds_kernel, scratch_kernel


def test_rejects_non_elf():
    with pytest.raises(ValueError, match="not an ELF"):
        read_code_object(b"hello, world" * 10)
    with pytest.raises(ValueError, match="bytes"):
        read_code_object("not bytes")  # type: ignore[arg-type]


def test_rejects_other_machines():
    host_elf = Path(sys.executable).resolve().read_bytes()
    with pytest.raises(ValueError, match="EM_AMDGPU"):
        read_code_object(host_elf)


def test_rejects_truncated_code_object(compiled):
    hsaco = compiled(lds_kernel(256), "gfx1201").hsaco
    with pytest.raises(ValueError):
        read_code_object(hsaco[:200])


@pytest.mark.parametrize("target", ["gfx1250", "gfx942"])
def test_lds_and_scratch_sizes(compiled, target):
    lds = compiled(lds_kernel(12288), target).info
    assert lds.group_segment_fixed_size == 12288
    assert lds.private_segment_fixed_size == 0
    scratch = compiled(scratch_kernel(), target).info
    assert scratch.private_segment_fixed_size >= 64  # the 16 x i32 array
    assert scratch.group_segment_fixed_size == 0


def test_to_dict_is_json(compiled):
    info = compiled(scratch_kernel(), "gfx1151").info
    d = json.loads(json.dumps(info.to_dict()))
    assert d["symbol"] == "k" and d["mach"] == 0x4A
    assert d["args"][:3] == [
        {"name": "out", "offset": 0, "size": 8, "value_kind": "global_buffer"},
        {"name": "i", "offset": 8, "size": 4, "value_kind": "by_value"},
        {"name": "j", "offset": 12, "size": 4, "value_kind": "by_value"},
    ]
    assert d["text_bytes"] > 0 and d["text_bytes"] % 4 == 0
