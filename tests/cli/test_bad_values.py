"""Every option that takes a number, a path, a name, a size, a shard or an address refuses a
bad value the same way: exit 2, one line on stderr naming the option, nothing on stdout, no
traceback, nothing created (each case runs in an empty folder, listed before and after).

Before ``cli/params.py``: ``--sample nan`` verified nothing and passed, ``--job-timeout
inf`` and ``compile --timeout inf`` were tracebacks, so were ``emulate --seed -1`` and a
garbage ``--scheduler``; ``verify --seed -1`` failed every kernel; ``--scheduler`` without
dask was ignored; ``--jobs`` had no upper bound; '' as ``--cache-dir``, ``--into`` or
``$WGRADCACHE_DIR`` meant the current directory; ``--shard ''`` built everything; ``gc
--max-size ''`` was ignored; ``ls --variant nonsense`` listed nothing with exit 0; full-width
digits passed as numbers; ``verify --target T`` without T's folder said ok."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from wgradcache.cli import main

LABEL = "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none"
PROBLEM = "1,8,8,8,8,3,3"

# Each command with what it needs to get as far as its options (a bad value comes last, so
# it replaces an earlier one of the same option).
BASE = {
    "build": ["build", "--target", "gfx1250", "--limit", "0", "--cache-dir", "c"],
    "verify": ["verify", "--from-cache", "--cache-dir", "c"],
    "compile": ["compile", LABEL, "--out", "o"],
    "emulate": ["emulate", LABEL, "--problem", PROBLEM],
    "select": ["select", "--target", "gfx1250", "--problem", PROBLEM, "--cache-dir", "c"],
    "refresh": ["refresh", "--plan", "plan.yaml", "--cache-dir", "c"],
    "gc": ["gc", "--dry-run", "--cache-dir", "c"],
    "ls": ["ls", "--cache-dir", "c"],
    "show": ["show", LABEL, "--cache-dir", "c"],
    "explain": ["explain", LABEL, "--cache-dir", "c"],
    "merge": ["merge", "src", "--into", "dst"],
    "cover": ["cover", "--timings", "t.json"],
    "count": ["count"],
}

VARIANTS = ("sync.default.none, sync.default.atomic, sync.default.two_stage, "
            "sync.cshuffle.none, sync.cshuffle.atomic, sync.cshuffle.two_stage, "
            "async.default.none, async.default.atomic, async.default.two_stage, "
            "async.cshuffle.none, async.cshuffle.atomic, async.cshuffle.two_stage, "
            "depthwise.default.none, depthwise.default.atomic, depthwise.default.two_stage, "
            "small_c.default.none, small_c.default.atomic")
EMPTY = "an empty path (give one; '' is not the current directory)"


def _int(opt: str, value: str, lo: int, hi: int) -> str:
    return f"{opt} {value!r}: expected an integer in [{lo}, {hi}]"


def _num(opt: str, value: str, lo: str, hi: str) -> str:
    return f"{opt} {value!r}: expected a finite number in {lo}, {hi}]"


def _cases():
    """(command, extra argv, the one stderr line without ``error: ``)."""
    for v in ("nan", "inf", "-inf", "0", "1.5", "", "\uff10.\uff15", "1e999", "0x1", "1_0"):
        yield "verify", ["--sample", v], _num("--sample", v, "(0", "1")
    for v in ("inf", "1e10", "nan", "0", "-5", "", "\uff13\uff10\uff10"):
        yield "build", ["--job-timeout", v], _num("--job-timeout", v, "[1", "86400")
    for v in ("inf", "nan", "1e10", "0.5"):
        yield "compile", ["--timeout", v], _num("--timeout", v, "[1", "86400")
    for cmd in ("emulate", "verify"):
        for v in ("-1", "4294967296", "\uff11", "1.5", ""):
            yield cmd, ["--seed", v], _int("--seed", v, 0, 2**32 - 1)
    for cmd in ("build", "refresh"):
        for v in ("0", "1025", "16" * 20, "\uff11\uff12", "", "-1", "2.0"):
            yield cmd, ["--jobs", v], _int("--jobs", v, 1, 1024)
    for v in ("-1", "\uff11\uff12", "1e3", "99999999999"):
        yield "build", ["--limit", v], _int("--limit", v, 0, 10**9)
    for v in ("0", "\uff11\uff12"):
        yield "select", ["--limit", v], _int("--limit", v, 1, 10**9)
    for v in ("0", "65536", "\uff12"):
        yield "emulate", ["--split-k", v], _int("--split-k", v, 1, 65535)
    yield "cover", ["--size", "\uff11\uff19"], _int("--size", "\uff11\uff19", 1, 256)
    yield "cover", ["--factor", "nan"], _num("--factor", "nan", "[1", "100")
    for v in ("garbage", "tcp://host", "tcp://host:0", "tcp://host:99999", "", "http://h:1",
              "tcp://h\uff11:1"):
        yield "build", ["--backend", "dask", "--scheduler", v], (
            f"--scheduler: {v!r} is not tcp://HOST:PORT (or tls://, ucx://; port 1 to 65535)")
    yield "build", ["--scheduler", "tcp://127.0.0.1:8786"], "--scheduler needs --backend dask"
    for cmd in ("build", "verify", "select", "refresh", "gc", "ls", "show", "explain"):
        yield cmd, ["--cache-dir", ""], f"--cache-dir: {EMPTY}"
    yield "merge", ["--into", ""], f"--into: {EMPTY}"
    yield "merge", [""], f"SOURCES: {EMPTY}"
    for cmd, opt in (("compile", "--out"), ("verify", "--junit"), ("verify", "--stream"),
                     ("refresh", "--report-dir"), ("refresh", "--plan"), ("cover", "--timings"),
                     ("cover", "--out"), ("count", "--geometries"), ("build", "--geometries")):
        yield cmd, [opt, ""], f"{opt}: {EMPTY}"
    yield "compile", ["--out", "a\0b"], "--out 'a\\x00b': a path cannot hold a NUL byte"
    for cmd in ("build", "refresh"):
        yield cmd, ["--shard", ""], "--shard: shard '' is not i/n with digits (e.g. 0/3)"
    yield "gc", ["--max-size", ""], ("--max-size: size '' is not a number with an optional "
                                     "unit (K, M, G, T)")
    for cmd in ("ls", "build", "count"):
        yield cmd, ["--variant", "nonsense"], (
            f"--variant: unknown variant 'nonsense'; valid: {VARIANTS}")
    for cmd in ("build", "select", "count"):
        yield cmd, ["--dtype", "fp8"], ("--dtype: unknown dtype 'fp8'; valid: fp16, bf16, "
                                        "fp16_f32, bf16_f32")
    yield "verify", ["--target", "gfx1201"], "--target: no cache for target gfx1201 at c/gfx1201"


CASES = list(_cases())


def _listing(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root)
                  for d, dirs, files in os.walk(root) for n in dirs + files)


def _assert_one_line(r, line: str) -> None:
    assert isinstance(r.exception, SystemExit), r.exception
    assert (r.exit_code, r.stdout, r.stderr.splitlines()) == (2, "", [f"error: {line}"])
    assert "Traceback" not in r.output


@pytest.mark.parametrize(("command", "extra", "line"), CASES,
                         ids=[f"{c}{' '.join(e)!r}" for c, e, _ in CASES])
def test_a_bad_value_is_one_line_and_creates_nothing(tmp_path, monkeypatch, command, extra,
                                                     line):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WGRADCACHE_DIR", raising=False)
    assert _listing(tmp_path) == []
    r = CliRunner().invoke(main, BASE[command] + extra)
    _assert_one_line(r, line)
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("command", ["ls", "gc", "build", "verify", "select", "show"])
def test_an_empty_cache_dir_variable_is_not_the_current_directory(tmp_path, monkeypatch,
                                                                  command):
    """``WGRADCACHE_DIR=`` (set, empty) was ``.``: gc evicted there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WGRADCACHE_DIR", "")
    argv = [a for a in BASE[command] if a not in ("--cache-dir", "c")]
    r = CliRunner().invoke(main, argv)
    _assert_one_line(r, "--cache-dir: $WGRADCACHE_DIR is set but empty (unset it, or give "
                        "a directory)")
    assert _listing(tmp_path) == []
    # --cache-dir given: the variable is not read
    r = CliRunner().invoke(main, ["ls", "--cache-dir", "c"])
    assert (r.exit_code, r.stderr) == (0, "")


def test_good_values_still_parse(tmp_path, monkeypatch):
    """The ASCII forms the types accept: signs, decimals, an exponent, spaces around."""
    from wgradcache.cli.params import FloatParam, IntParam, SchedulerParam

    assert [IntParam(0, 10).convert(v, None, None) for v in ("0", "+7", " 10 ", 3)] == [
        0, 7, 10, 3]
    assert [FloatParam(0, 1, lo_open=True).convert(v, None, None)
            for v in ("1", ".5", "5e-1", "1.", 0.25)] == [1.0, 0.5, 0.5, 1.0, 0.25]
    assert [SchedulerParam().convert(v, None, None) for v in (
        "tcp://10.0.0.1:8786", "sched.example:1", "tls://[::1]:65535")] == [
        "tcp://10.0.0.1:8786", "sched.example:1", "tls://[::1]:65535"]


def test_no_more_workers_than_jobs(monkeypatch):
    """--jobs 16 for 2 jobs started 16 loky workers on a 2-core machine."""
    from wgradcache.pipeline import workers

    seen = []
    monkeypatch.setattr(workers, "_run_chunk",
                        lambda part, opts, *a: seen.append(opts.n_jobs) or set())
    monkeypatch.setattr(workers, "run_one_worker", lambda *a, **k: seen.append(1))
    for n in (2, 1, 40):
        tasks = [SimpleNamespace(key=str(i)) for i in range(n)]  # the runners are stubs
        workers.run_chunked(tasks, workers.RunOptions(n_jobs=16), lambda r: None)
    assert seen == [2, 1, 16]


@pytest.mark.parametrize(("field", "value", "why"), [
    ("jobs", 1025, "jobs 1025: expected 0 (all cores) to 1024"),
    ("jobs", -1, "jobs -1: expected 0 (all cores) to 1024"),
    ("job_timeout", float("inf"), "job_timeout inf: expected finite seconds in [1, 86400]"),
    ("job_timeout", float("nan"), "job_timeout nan: expected finite seconds in [1, 86400]"),
    ("job_timeout", 0.5, "job_timeout 0.5: expected finite seconds in [1, 86400]"),
])
def test_a_library_build_request_out_of_range_is_refused(field, value, why):
    from wgradcache.pipeline.plan import BuildRequest

    with pytest.raises(ValueError) as e:
        BuildRequest(target="gfx1250", **{field: value})
    assert str(e.value) == why
