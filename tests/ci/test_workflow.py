"""The nightly workflow: valid against GitHub's workflow schema, and run where its install
works (a Debian 12 container, as root, from the apt sources that carry LLVM 22)."""

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


def test_every_job_installs_in_a_debian_12_container_without_sudo():
    doc = yaml.safe_load(NIGHTLY.read_text())
    assert doc["jobs"]
    for name, job in doc["jobs"].items():
        image = job.get("container")
        image = image["image"] if isinstance(image, dict) else image
        assert image and image.endswith("bookworm"), f"{name}: container {image!r}"
        runs = [s.get("run", "") for s in job["steps"]]
        uses = [s.get("uses", "") for s in job["steps"]]
        assert not any(re.search(r"\bsudo\b", r) for r in runs), name
        # the container's Python, which make deps installs into
        assert not any(u.startswith("actions/setup-python") for u in uses), name
        install = next(r for r in runs if "make deps" in r)
        lines = [ln.strip() for ln in install.splitlines()]
        assert lines.index("make deps") > lines.index("apt-get update -q")
        assert "$DEBIAN_SOURCES" in install and "/etc/apt/sources.list.d/" in install


def test_the_apt_sources_carry_bookworm_security():
    """Debian 12 takes lld-22, llvm-22 and liblld-22-dev from bookworm-security: the
    sources the jobs write must name it (and the main suites) with the archive key."""
    sources = yaml.safe_load(NIGHTLY.read_text())["env"]["DEBIAN_SOURCES"]
    stanzas = [dict(ln.split(": ", 1) for ln in block.splitlines())
               for block in sources.strip().split("\n\n")]
    suites = {s: st["URIs"] for st in stanzas for s in st["Suites"].split()}
    assert suites == {"bookworm": "http://deb.debian.org/debian",
                      "bookworm-updates": "http://deb.debian.org/debian",
                      "bookworm-security": "http://deb.debian.org/debian-security"}
    assert all(st["Types"] == "deb" and st["Components"] == "main" and
               st["Signed-By"] == "/usr/share/keyrings/debian-archive-keyring.gpg"
               for st in stanzas)
