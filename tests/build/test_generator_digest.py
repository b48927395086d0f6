"""The generator digest covers exactly what emitting IR imports."""

from __future__ import annotations

import subprocess
import sys

from wgradcache.wgrad.emit import GENERATOR_SOURCES

CODE = r"""
import sys
from wgradcache.wgrad.emit import emit_ir
from wgradcache.kernel.lower_llvm import lower
from wgradcache.model.spec import from_label
from wgradcache.wgrad.stage2 import build_stage2
for label in ("gfx1250-fp16-t64x64x32-w2x2-c16x16-async-cshuffle-atomic",
              "gfx1250-bf16-t64x64x32-w2x2-v8x8-sync-default-two_stage-wsr8",
              "gfx1151-fp16-t32x32x32-w1x1-v8x8-sync-cshuffle-none"):
    emit_ir(from_label(label))
lower(build_stage2("gfx1250", "fp16", 8), "gfx1250")
print(" ".join(sorted(m for m in sys.modules if m.startswith("wgradcache."))))
"""


def test_digest_sources_are_the_modules_emission_imports():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                         check=True).stdout.split()
    imported = {m.removeprefix("wgradcache.").replace(".", "/") + ".py" for m in out
                if not m.startswith("wgradcache.jobs")}  # job data: validity, not IR
    packages = {"kernel.py", "model.py", "wgrad.py"}  # the package __init__s
    assert imported - packages == set(GENERATOR_SOURCES)
