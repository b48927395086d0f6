"""The generator digest covers exactly what emitting IR imports, and nothing that cannot
change IR: editing the error model or a CU count must not re-emit every job."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from wgradcache.wgrad import emit
from wgradcache.wgrad.emit import GENERATOR_SOURCES

CODE = r"""
import sys
from wgradcache.wgrad.emit import emit_ir
from wgradcache.kernel.lower_llvm import lower
from wgradcache.model.spec import from_label
from wgradcache.wgrad.stage2 import build_stage2
for label in ("gfx1250-fp16-t64x64x32-w2x2-c16x16-async-cshuffle-atomic",
              "gfx1250-bf16-t64x64x32-w2x2-v8x8-sync-default-two_stage-wsr8",
              "gfx1151-fp16-t32x32x32-w1x1-v8x8-sync-cshuffle-none",
              "sm_90-bf16-t128x128x32-w2x2-c16x16-async-cshuffle-none"):
    emit_ir(from_label(label))
lower(build_stage2("gfx1250", "fp16", 8), "gfx1250")
for name, m in sorted(sys.modules.items()):
    if name.startswith("wgradcache."):
        print(name, "package" if hasattr(m, "__path__") else "module")
"""


def _emission_imports() -> set[str]:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    rows = [line.split() for line in out if line]
    return {name.removeprefix("wgradcache.").replace(".", "/") + ".py" for name, kind in rows
            if kind == "module"}  # a package's __init__ holds no generator code


def test_digest_sources_are_the_modules_emission_imports():
    imported = _emission_imports()
    assert {m for m in imported if not m.startswith("jobs/")} == set(GENERATOR_SOURCES)
    # job data decides validity, numerics the bounds, devices the ranking: none is IR
    assert not {m for m in imported if m.startswith(("jobs/", "numerics/"))}
    assert "model/devices.py" not in imported


def test_editing_the_error_model_or_a_cu_count_keeps_the_digest(tmp_path, monkeypatch):
    pkg = tmp_path / "wgradcache"
    shutil.copytree(Path(emit.__file__).resolve().parents[1], pkg,
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(emit, "_PKG", pkg)
    digest = emit.generator_digest.__wrapped__  # uncached
    before = digest()

    def edit(rel: str, old: str, new: str) -> None:
        p = pkg / rel
        text = p.read_text()
        assert old in text, (rel, old)
        p.write_text(text.replace(old, new, 1))

    edit("numerics/error_model.py", "slice_k * u32", "(slice_k + 1) * u32")
    edit("model/devices.py", "DeviceSize(40, 1,", "DeviceSize(48, 1,")
    edit("numerics/layers.py", '"""', '"""Edited. ')
    assert digest() == before
    edit("kernel/ir.py", '"""', '"""Edited. ')
    assert digest() != before
