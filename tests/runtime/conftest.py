"""The fake HIP device: ``from hip import hip`` in runtime/hip.py yields a FakeHip."""

from __future__ import annotations

import sys

import pytest
from fake_hip import FakeHip


@pytest.fixture
def fake_hip(monkeypatch):
    """One gfx1250 device backed by host memory and the emulator (see fake_hip.py)."""
    fake = FakeHip(archs=("gfx1250",))
    monkeypatch.setitem(sys.modules, "hip", fake.as_package())
    return fake
