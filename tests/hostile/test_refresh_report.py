"""refresh reads the report it wrote last night as input: the report folder persists between
runs, so whatever is in ``report.json`` (deep, truncated, wrongly typed, oversized, a FIFO,
a link) is refused in one line and the run goes on as a first run. And what it prints or
writes of the cache (labels, reasons) is escaped as verify escapes it, so a label cannot
forge a CI annotation or drive the terminal.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from tests.hostile.conftest import deadline
from wgradcache.cache.store import TargetCache
from wgradcache.cli import main
from wgradcache.pipeline.refresh import MAX_REPORT, read_previous

T = "gfx1250"
KEY = "ab" * 32


def _write(path, data: bytes) -> None:
    path.write_bytes(data)


def _sparse(path) -> None:
    with open(path, "wb") as f:
        f.truncate(MAX_REPORT + 1)


def _link(path) -> None:
    real = path.parent / "elsewhere.json"
    real.write_text(json.dumps({"targets": {T: {"entries": [KEY]}}}))
    path.symlink_to(real)


HOSTILE = [
    ("deep", lambda p: _write(p, b"[" * 200_000 + b"]" * 200_000),
     "corrupt: JSON nested too deep"),
    ("deep-object", lambda p: _write(p, b'{"targets":' + b"[" * 200_000 + b"]" * 200_000
                                     + b"}"), "corrupt: JSON nested too deep"),
    ("truncated", lambda p: _write(p, b'{"targets": {"gfx1250": {"entr'),
     "corrupt: not whole JSON (Unterminated string starting at at char 25)"),
    ("not-utf8", lambda p: _write(p, b'{"x": "\xff"}'), "corrupt: not UTF-8 (byte 7)"),
    ("a-list", lambda p: _write(p, b"[1, 2]"), "corrupt: not a JSON object"),
    ("targets-list", lambda p: _write(p, b'{"targets": []}'),
     "corrupt: targets: list, not an object"),
    ("target-str", lambda p: _write(p, b'{"targets": {"gfx1250": "x"}}'),
     "targets.gfx1250: corrupt: str, not an object"),
    ("entries-int", lambda p: _write(p, b'{"targets": {"gfx1250": {"entries": 5}}}'),
     "targets.gfx1250: corrupt: entries: not a list of keys"),
    ("entries-nested", lambda p: _write(p, b'{"targets": {"gfx1250": {"entries": [[1]]}}}'),
     "targets.gfx1250: corrupt: entries: not a list of keys"),
    ("digest-int", lambda p: _write(p, b'{"generator_digest": 5}'),
     "corrupt: generator_digest: int, not a string"),
    ("oversized", _sparse, f"corrupt: {MAX_REPORT + 1} bytes, over the 64 MiB cap"),
    ("fifo", os.mkfifo, "corrupt: a FIFO, not a regular file (not followed)"),
    ("symlink", _link, "corrupt: a symbolic link, not a regular file (not followed)"),
]


@pytest.mark.parametrize(("plant", "reason"), [h[1:] for h in HOSTILE],
                         ids=[h[0] for h in HOSTILE])
def test_a_hostile_previous_report_is_one_line(tmp_path, plant, reason):
    path = tmp_path / "report.json"
    plant(path)
    with deadline(), pytest.raises(ValueError) as e:
        read_previous(path)
    assert str(e.value) == f"{path}: {reason}"


def test_a_whole_previous_report_is_read_with_its_types(tmp_path):
    path = tmp_path / "report.json"
    assert read_previous(path) is None
    path.write_text(json.dumps({"generator_digest": "g", "targets": {
        T: {"entries": [KEY], "toolchain_digest": "t"}, "not-a-target": 5}}))
    got = read_previous(path)
    assert (got.generator_digest, got.toolchain_digest) == ("g", None)
    assert list(got.targets) == [T]
    assert (got.targets[T].entries, got.targets[T].toolchain_digest) == (frozenset([KEY]), "t")


@pytest.fixture
def scene(small_cache, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], cache)
    plan = tmp_path / "plan.yaml"
    plan.write_text("targets: [gfx1250]\ndtypes: [fp16, bf16]\nverify: {level: integrity}\n")
    report = tmp_path / "report"
    report.mkdir()
    args = ["refresh", "--plan", str(plan), "--report-dir", str(report), "--geometries",
            str(small_cache["geometries"]), "--cache-dir", str(cache)]
    return cache, report, args


def test_refresh_over_a_deep_report_runs_as_a_first_run_and_says_why(scene):
    """(A FIFO is refused by the same reader, above; this run also writes the report, and
    writing over a FIFO is the report writer's to refuse.)"""
    cache, report, args = scene
    (report / "report.json").write_bytes(b"[" * 200_000 + b"]" * 200_000)
    with deadline():
        r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    line = (f"Previous report not used: {report / 'report.json'}: corrupt: JSON nested too "
            "deep")
    assert line in r.stdout.splitlines()
    assert "First run: 18 entries." in r.stdout


def test_a_hostile_label_is_escaped_in_report_md_and_on_stdout(scene):
    cache, report, args = scene
    c = TargetCache(cache, T)
    ik, e = next((ik, e) for ik, e in c.iter_entries() if e.dtype == "fp16")
    path = c.entry_path(ik)
    evil = "x\n::error::forged\x1b[2J"
    path.write_text(json.dumps({**json.loads(path.read_bytes()), "label": evil}))
    with deadline():
        r = CliRunner().invoke(main, args)
    assert r.exit_code == 1, r.output
    md = (report / "report.md").read_text()
    for text in (r.stdout, md):
        assert "\x1b" not in text
        assert not [x for x in text.splitlines() if x.startswith("::")]
        assert ("- verify integrity `x\\n::error::forged\\x1b[2J`: label not what its "
                "identity says") in text.splitlines()
