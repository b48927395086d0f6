"""Hypothesis over the command line's option values: every command, every numeric and path
option, values drawn from what breaks parsers (nan, inf, negative, huge, empty, full-width
and other unicode digits, NUL, path traversal, /etc, symlinks inside the sandbox). The only
outcomes are exit 0, 1 or 2 with no traceback, and no file created outside the sandbox.

Builds stay tiny (``--limit 0``/``1`` on a one-geometry file), gc is a dry run, refresh's
plan does not exist; the whole test stays well under a minute."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import small_geometries
from wgradcache.cli import main

LABEL = "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none"
PROBLEM = "1,8,8,8,8,3,3"

HOSTILE_NUMBERS = ["nan", "NaN", "inf", "-inf", "+inf", "1e999", "-1", "-0", "0", "1", "2",
                   "0.5", "1e10", "4294967296", "9" * 40, "", " ", "\uff11\uff12",
                   "\u0661\u0662", "1_0", "0x10", "1e", ".", "--", "\x00", "1\n"]
NUMBERS = st.one_of(st.sampled_from(HOSTILE_NUMBERS), st.integers(-2**70, 2**70).map(str),
                    st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.text(max_size=8))
# Paths a command may read: anything, the system's included.
READ_PATHS = ["", "/etc", "/etc/passwd", "/dev/null", "../x", "../../../x", "link-etc",
              "link-other", "a\nb", "\uff41", "x" * 300, "\x00", ".", "missing/deep/x"]
# Paths a command may write: inside the sandbox's roots only (cwd root/w1/w2, so ``..`` and
# ``../..`` stay in root; ``link-other`` leads to the second root).
WRITE_PATHS = ["", "out", "../x", "../../x", "link-other", "link-other/sub", "a\nb",
               "\uff41\uff42", "x" * 300, "\x00", ".", "-", "{other}/w"]

OPTIONS = {  # command: (the argv that gets it to its options, {option: values})
    "build": (["build", "--target", "gfx1250", "--limit", "0", "--geometries", "{geo}"],
              {"--limit": st.sampled_from(["0", "1"]) | NUMBERS, "--jobs": NUMBERS,
               "--job-timeout": NUMBERS, "--shard": NUMBERS | st.sampled_from(["0/1", "1/2"]),
               "--cache-dir": "write", "--geometries": "read", "--variant": NUMBERS,
               "--dtype": NUMBERS, "--scheduler": NUMBERS}),
    "verify": (["verify", "--from-cache"],
               {"--sample": NUMBERS, "--seed": NUMBERS, "--cache-dir": "read",
                "--junit": "write", "--stream": "write", "--target": NUMBERS,
                "--problem": NUMBERS, "--geometries": "read"}),
    "compile": (["compile", LABEL, "--out", "out"], {"--timeout": NUMBERS, "--out": "write"}),
    "emulate": (["emulate", LABEL, "--problem", PROBLEM],
                {"--seed": NUMBERS, "--split-k": NUMBERS, "--problem": NUMBERS,
                 "--geometries": "read"}),
    "select": (["select", "--target", "gfx1250", "--problem", PROBLEM],
               {"--limit": NUMBERS, "--dtype": NUMBERS, "--cache-dir": "read",
                "--problem": NUMBERS}),
    "refresh": (["refresh", "--plan", "no-plan.yaml"],
                {"--jobs": NUMBERS, "--shard": NUMBERS, "--cache-dir": "write",
                 "--report-dir": "write", "--plan": "read"}),
    "gc": (["gc", "--dry-run"], {"--max-size": NUMBERS, "--cache-dir": "read",
                                 "--target": NUMBERS}),
    "ls": (["ls"], {"--cache-dir": "read", "--variant": NUMBERS, "--target": NUMBERS}),
    "show": (["show", LABEL], {"--cache-dir": "read"}),
    "explain": (["explain", LABEL], {"--cache-dir": "read"}),
    "merge": (["merge", "no-shard", "--into", "dst"], {"--into": "write"}),
    "cover": (["cover", "--timings", "t.json"],
              {"--size": NUMBERS, "--factor": NUMBERS, "--timings": "read", "--out": "write"}),
    "count": (["count"], {"--geometries": "read", "--variant": NUMBERS, "--dtype": NUMBERS}),
}


# Values that parse, so that runs get past their options too (exit 0 or 1).
GOOD = {"--limit": ["0", "1"], "--jobs": ["1", "2"], "--job-timeout": ["60"],
        "--shard": ["0/1", "1/2"], "--cache-dir": ["c", "../c", "link-other/c"],
        "--variant": ["sync.default.none"], "--dtype": ["fp16", "bf16_f32"],
        "--sample": ["0.5", "1"], "--seed": ["0", "7", "4294967295"],
        "--junit": ["j.xml"], "--stream": ["s.jsonl"], "--target": ["gfx1250", "sm_90"],
        "--problem": [PROBLEM, "2,16,7,7,16,3,3,1,1"], "--geometries": ["{geo}"],
        "--timeout": ["60"], "--out": ["out", "link-other/out"], "--split-k": ["1", "2"],
        "--max-size": ["1G", "0"], "--report-dir": ["r"], "--into": ["dst"],
        "--size": ["3"], "--factor": ["1.5"], "--timings": ["t.json"]}


def _values(opt: str, kind) -> st.SearchStrategy[str]:
    if kind == "read":
        bad = st.sampled_from(READ_PATHS) | st.text(max_size=12)
    elif kind == "write":
        bad = st.sampled_from(WRITE_PATHS)
    else:
        bad = kind
    return st.sampled_from(GOOD[opt]) | bad if opt in GOOD else bad


def command_line(data, name: str) -> list[str]:
    """``name``'s base argv and one to three of its options, each with a drawn value."""
    base, options = OPTIONS[name]
    chosen = data.draw(st.lists(st.sampled_from(sorted(options)), min_size=1,
                                max_size=min(3, len(options)), unique=True))
    argv = list(base)
    for opt in chosen:
        argv += [opt, data.draw(_values(opt, options[opt]), label=opt)]
    return argv


def _names(path: Path) -> set[str]:
    return set(os.listdir(path))


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """``<tmp>/root`` (cwd ``root/w1/w2``) and ``<tmp>/other``, the two roots a run may write
    in; links in the cwd to the other root and to /etc; a tiny job file and a timings file
    that is not one."""
    tmp = tmp_path_factory.mktemp("fuzz")
    cwd = tmp / "root" / "w1" / "w2"
    cwd.mkdir(parents=True)
    (tmp / "other").mkdir()
    (cwd / "link-other").symlink_to(tmp / "other")
    (cwd / "link-etc").symlink_to("/etc")
    geo = small_geometries(tmp / "root")
    (cwd / "t.json").write_text("{}\n")
    return tmp, cwd, geo


def _check(sandbox, monkeypatch, argv: list[str]) -> None:
    """Exit 0, 1 or 2; never a traceback; a refusal is one line; nothing new in the
    sandbox's top folder, above it, in /etc or in /."""
    tmp, cwd, geo = sandbox
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("WGRADCACHE_DIR", raising=False)
    monkeypatch.delenv("WGRADCACHE_DEBUG", raising=False)
    argv = [a.replace("{geo}", str(geo)).replace("{other}", str(tmp / "other")) for a in argv]
    watched = {p: _names(p) for p in (tmp, tmp.parent, Path("/etc"), Path("/"))}
    r = CliRunner().invoke(main, argv)
    assert r.exit_code in (0, 1, 2), (argv, r.output[-2000:])
    assert r.exception is None or isinstance(r.exception, SystemExit), (argv, r.exception)
    assert "Traceback" not in r.output, (argv, r.output[-2000:])
    if r.exit_code == 2:
        assert len(r.stderr.splitlines()) == 1, (argv, r.stderr)
    assert {p: _names(p) for p in watched} == watched, argv


@pytest.mark.parametrize("command", sorted(OPTIONS))
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_option_values_never_traceback_or_escape(sandbox, monkeypatch, command, data):
    _check(sandbox, monkeypatch, command_line(data, command))


@pytest.mark.parametrize("argv", [
    ["emulate", LABEL, "--problem", PROBLEM, "--seed", "-1"],
    ["compile", LABEL, "--out", "out", "--timeout", "inf"],
    ["build", "--target", "gfx1250", "--limit", "0", "--backend", "dask", "--scheduler", "x"],
], ids=["emulate-seed", "compile-timeout", "build-scheduler"])
def test_the_values_that_were_tracebacks(sandbox, monkeypatch, argv):
    """Found by hand before this test: each was a traceback, now one line."""
    _check(sandbox, monkeypatch, argv)
