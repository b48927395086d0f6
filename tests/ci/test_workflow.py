"""The nightly workflow: valid against GitHub's workflow schema, and run where `make deps`
works (a Debian 12 container, as root, from the image's own apt sources)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
NIGHTLY = ROOT / ".github" / "workflows" / "nightly-cache.yml"


def schema_check(path: Path) -> subprocess.CompletedProcess:
    """check-jsonschema with the workflow schema it ships (no network needed)."""
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                           "vendor.github-workflows", str(path)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_the_github_schema(path):
    out = schema_check(path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_schema_check_catches_a_mistake(tmp_path):
    """A misspelt job key fails the check, so the test above can fail."""
    bad = tmp_path / "bad.yml"
    bad.write_text(NIGHTLY.read_text().replace("runs-on:", "runs_on:", 1))
    out = schema_check(bad)
    assert out.returncode == 1 and "runs_on" in out.stdout


def _deb_packages() -> list[str]:
    """The Makefile's DEB_PACKAGES: what ``make deps`` installs with apt-get."""
    (line,) = [ln for ln in (ROOT / "Makefile").read_text().splitlines()
               if ln.startswith("DEB_PACKAGES = ")]
    return line.split(" = ", 1)[1].split()


def test_every_job_runs_make_deps_where_it_can_install():
    """``make deps`` runs apt-get (root, no sudo) and the container's pip: a Debian 12
    Python image, whose own apt sources carry LLVM 22 (the security suite), index refreshed
    first; no setup-python, which would install into another Python."""
    doc = yaml.safe_load(NIGHTLY.read_text())
    assert doc["jobs"]
    for name, job in doc["jobs"].items():
        image = job.get("container")
        image = image["image"] if isinstance(image, dict) else image
        assert image == "python:3.11-bookworm", f"{name}: container {image!r}"
        runs = [s.get("run", "") for s in job["steps"]]
        uses = [s.get("uses", "") for s in job["steps"]]
        assert not any(re.search(r"\bsudo\b", r) for r in runs), name
        assert not any(u.startswith("actions/setup-python") for u in uses), name
        install = next(r for r in runs if "make deps" in r)
        assert install.split("\n") == ["apt-get update -q", "make deps", ""], name


def test_the_workflow_keeps_the_images_apt_sources_and_names_no_host():
    text = NIGHTLY.read_text()
    assert "/etc/apt" not in text and "sources.list" not in text
    assert "://" not in text


def test_make_deps_installs_what_the_workflow_says():
    """The header names the Debian packages ``make deps`` installs; the recipe installs
    them with apt-get and the package with the Python it runs."""
    assert _deb_packages() == ["lld-22", "llvm-22", "llvm-22-dev", "liblld-22-dev", "g++"]
    header = " ".join(ln.lstrip("# ") for ln in NIGHTLY.read_text().splitlines()
                      if ln.startswith("#"))
    for pkg in _deb_packages():
        assert re.search(rf"(?<![\w-]){re.escape(pkg)}(?![\w-])", header), pkg
    recipe = (ROOT / "Makefile").read_text().split("\n.deps-stamp:", 1)[1].split("\n\n", 1)[0]
    assert "apt-get install -y -q $(DEB_PACKAGES)" in recipe
    assert "apt-get update" in recipe and "$(PIP) install" in recipe
