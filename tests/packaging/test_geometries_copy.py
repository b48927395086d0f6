"""The package's geometries.yaml is the root file's bytes (the wheel test checks the wheel).

The root file is the one users edit (``make`` copies it into the package); the package copy
is what the loader and an installed wheel read. A difference means an edit that has not
reached the package, or one made to the copy alone.
"""

from __future__ import annotations

from pathlib import Path

from wgradcache.jobs.geometries import default_path

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_copy_is_the_root_file(monkeypatch):
    monkeypatch.delenv("WGRADCACHE_GEOMETRIES", raising=False)
    packaged = default_path()
    assert packaged == ROOT / "src" / "wgradcache" / "data" / "geometries.yaml"
    assert packaged.read_bytes() == (ROOT / "geometries.yaml").read_bytes(), (
        "geometries.yaml and src/wgradcache/data/geometries.yaml differ: "
        "`make deps` copies the root file into the package")
