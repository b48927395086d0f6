"""Only the catalog and the backends know a vendor: no other module asks which vendor a
target is, by a flag or by the shape of its name."""

from __future__ import annotations

import re

from test_import_cycles import PACKAGE

_ASKS = re.compile(r"is_nvidia|startswith\(\"(gfx|sm_)|== \"(sm_|gfx)\d")
_KNOWS = {"model/targets.py", "model/backends.py"}


def test_no_module_outside_the_catalog_and_backends_asks_the_vendor():
    asking = [f"{p.relative_to(PACKAGE)}:{i}" for p in sorted(PACKAGE.rglob("*.py"))
              if str(p.relative_to(PACKAGE)) not in _KNOWS
              and p.relative_to(PACKAGE).parts[0] != "backend"
              for i, line in enumerate(p.read_text().splitlines(), 1) if _ASKS.search(line)]
    assert asking == []


def test_the_pattern_finds_a_vendor_question():
    assert _ASKS.search('if get_target(t).is_nvidia:')
    assert _ASKS.search('return NV if cpu.startswith("sm_") else AMD')
    assert not _ASKS.search('backend_of(t).blob_suffix')
