"""Hostile YAML through the CLI: every input is one line on stderr and exit code 2.

Each test runs under the ``bounded`` fixture: at most 1 GiB more address space and a 60 s
alarm, so a loader that expanded an alias bomb or read /dev/zero to its end fails with a
MemoryError, and one that waited on a FIFO fails on the alarm, instead of taking the
machine or the suite with it. No test asserts a duration.
"""

from __future__ import annotations

import os
import resource
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from wgradcache.cli import main
from wgradcache.jobs.geometries import GeometryFileError, default_path, load
from wgradcache.jobs.yamlsafe import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES
from wgradcache.pipeline.refresh import PlanError, load_plan

SHIPPED = default_path().read_text()


def _vm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize")


@pytest.fixture(autouse=True)
def bounded():
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_vm_bytes() + (1 << 30), hard))

    def alarm(*_):
        raise TimeoutError("the loader blocked (60 s alarm)")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _cli(args: list[str]) -> str:
    """stderr of one run; asserts exit code 2 and exactly one line."""
    r = CliRunner().invoke(main, args)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and r.output.startswith("error: "), r.output[:500]
    return r.output


def _count(path: Path | str) -> str:
    return _cli(["count", "--geometries", str(path)])


def _refresh(path: Path | str, tmp_path: Path) -> str:
    return _cli(["refresh", "--plan", str(path), "--cache-dir", str(tmp_path / "c"),
                 "--report-dir", str(tmp_path / "r")])


def _bomb(levels: int) -> str:
    """The billion laughs: each level a list of nine aliases of the one before (4.9 KB at
    nine levels; expanded, 9**levels strings)."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


# ---- the file itself ----------------------------------------------------------------------

def test_alias_bomb_is_refused_at_its_first_alias(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text(_bomb(9))
    assert _count(p) == f"error: {p}:2: alias: aliases are not accepted (*l0)\n"
    assert _refresh(p, tmp_path) == f"error: {p}:2: alias: aliases are not accepted (*l0)\n"


def test_one_alias_in_the_shipped_file_is_refused_and_an_anchor_alone_is_not(tmp_path):
    p = tmp_path / "g.yaml"
    text = SHIPPED.replace("  tile_m: [32, 64, 128]", "  tile_m: &t [32, 64, 128]")
    p.write_text(text)
    assert load(p).ladder["tile_m"] == (32, 64, 128)
    p.write_text(text.replace("  tile_n: [32, 64, 128]", "  tile_n: *t"))
    line = text.splitlines().index("  tile_n: [32, 64, 128]") + 1
    assert _count(p) == f"error: {p}:{line}: alias: aliases are not accepted (*t)\n"


@pytest.mark.parametrize("text, line", [
    ("[" * 2000 + "]" * 2000, 1),
    ("a: " + "{b: " * 40 + "1" + "}" * 40 + "\n", 1),
    ("".join(f"{' ' * 2 * i}k{i}:\n" for i in range(30)) + " " * 60 + "v\n", MAX_DEPTH + 1),
], ids=["flow-lists", "flow-maps", "block-maps"])
def test_deep_nesting_is_refused_without_recursion(tmp_path, text, line):
    p = tmp_path / "deep.yaml"
    p.write_text(text)
    assert _count(p) == f"error: {p}:{line}: nesting: deeper than {MAX_DEPTH} levels\n"
    assert _refresh(p, tmp_path) == f"error: {p}:{line}: nesting: deeper than {MAX_DEPTH} " \
                                    "levels\n"


def test_too_many_nodes(tmp_path):
    p = tmp_path / "wide.yaml"
    p.write_text("[" + "0," * MAX_NODES + "0]\n")
    assert _count(p) == f"error: {p}:1: size: more than {MAX_NODES} nodes\n"


def test_oversized_file_is_read_no_further_than_the_cap(tmp_path):
    p = tmp_path / "big.yaml"
    with p.open("wb") as f:  # sparse: 8 GiB of zeros cost no disk, and no read past the cap
        f.truncate(8 << 30)
    msg = f"error: {p}: larger than {MAX_FILE_BYTES} bytes (the cap on a YAML input)\n"
    assert _count(p) == msg
    p.write_text("#" * MAX_FILE_BYTES + "\n")
    assert _refresh(p, tmp_path) == msg


def test_not_utf8_names_line_and_offset(tmp_path):
    p = tmp_path / "latin1.yaml"
    p.write_bytes(b"schema: 1\nladder: caf\xe9\n")
    assert _count(p) == f"error: {p}:2: not UTF-8 (byte 0xe9 at offset 21)\n"


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "dir", "dangling", "loop"])
def test_symlink_to_what_is_not_a_file(tmp_path, kind):
    where = tmp_path / "target"
    what = {"dev_zero": "a character device, not a regular file",
            "fifo": "a FIFO, not a regular file", "dir": "a directory, not a regular file",
            "dangling": "No such file or directory",
            "loop": "Too many levels of symbolic links"}[kind]
    if kind == "dev_zero":
        where = Path("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(where)  # no writer: a blocking open would wait forever
    elif kind == "dir":
        where.mkdir()
    link = tmp_path / "g.yaml"
    link.symlink_to(link if kind == "loop" else where)
    assert _count(link) == f"error: {link}: cannot read: {what}\n"
    with pytest.raises(PlanError, match=f"^{link}: cannot read: {what}$"):
        load_plan(link)
    if kind != "dir":  # click.Path(dir_okay=False) on --plan prints its usage block
        assert _refresh(link, tmp_path) == f"error: {link}: cannot read: {what}\n"


def test_fifo_and_device_given_directly(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert _count(fifo) == f"error: {fifo}: cannot read: a FIFO, not a regular file\n"
    assert _refresh("/dev/zero", tmp_path) == \
        "error: /dev/zero: cannot read: a character device, not a regular file\n"


def test_a_path_that_climbs_out_is_just_a_path(tmp_path, monkeypatch):
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (tmp_path / "shadow").write_text("root:$6$salt$hash:19000:0:99999:7:::\n")
    monkeypatch.chdir(deep)
    assert _count("../../shadow").startswith("error: ../../shadow:1: ")
    assert _count("../../../../../../../../nonexistent/shadow") == \
        "error: ../../../../../../../../nonexistent/shadow: cannot read: No such file or " \
        "directory\n"


def test_a_control_character_in_the_path_stays_on_one_line(tmp_path):
    p = tmp_path / "a\nb.yaml"
    assert _count(p) == f"error: {tmp_path}/a\\nb.yaml: cannot read: No such file or " \
                        "directory\n"


# ---- truncated and mistyped geometries ----------------------------------------------------

def _line(text: str) -> int:
    """The shipped file's line (1-based) where ``text`` first appears."""
    return SHIPPED[:SHIPPED.index(text)].count("\n") + 1


@pytest.mark.parametrize("cut, line, message", [
    # libyaml marks the end of the stream on the line after the last one
    ("  tile_k: [32,", _line("  tile_k:") + 1, "not valid YAML: did not find expected node "
                                               "content"),
    ("filters:\n", _line("filters:"), "filters: expected a mapping, got null"),
    # a mapping starts at its first key: the comments above it are not part of it
    ("  max_acc_per_lane: 6", _line("  max_acc_per_lane:"),
     "filters: missing key 'max_block_size'"),
])
def test_truncated_geometries(tmp_path, cut, line, message):
    p = tmp_path / "g.yaml"
    p.write_text(SHIPPED[:SHIPPED.index(cut) + len(cut)])
    assert _count(p) == f"error: {p}:{line}: {message}\n"


def test_empty_geometries(tmp_path):
    p = tmp_path / "g.yaml"
    p.write_text("# nothing\n")
    assert _count(p) == f"error: {p}:1: <top>: empty file\n"


@pytest.mark.parametrize("value, got", [
    ("1099511627776", "must be in [1, 128], got 1099511627776"),
    ("-8", "must be in [1, 128], got -8"),
    ("0", "must be in [1, 128], got 0"),
    ("9" * 5000, "must be in [1, 128], got a 5000-digit number"),
    ("eight", "expected an integer in [1, 128], got a string 'eight'"),
    ("'8'", "expected an integer in [1, 128], got a string '8'"),
    ("true", "expected an integer in [1, 128], got a boolean true"),
    ("8.0", "expected an integer in [1, 128], got a float 8.0"),
    ("~", "expected an integer in [1, 128], got null"),
    ("[8]", "expected an integer in [1, 128], got a list"),
    ("{n: 8}", "expected an integer in [1, 128], got a mapping"),
    ("0x8", "expected an integer in [1, 128] in decimal digits, got 0x8"),
    ("1_0", "expected an integer in [1, 128] in decimal digits, got 1_0"),
    ("１", "expected an integer in [1, 128], got a string '１'"),
    ("!!int \"8\\n9\"", "expected an integer in [1, 128] in decimal digits, got 8\\n9"),
    ("'" + "x" * 300_000 + "'", "expected an integer in [1, 128], got a string '"
     + "x" * 60 + "'... (300000 characters)"),
], ids=lambda v: v if len(v) < 30 else f"{v[:20]}...")
def test_ws_replicas_bounds_and_types(tmp_path, value, got):
    p = tmp_path / "g.yaml"
    text = SHIPPED.replace("ws_replicas: 8", f"ws_replicas: {value}")
    p.write_text(text)
    line = text.splitlines().index(f"ws_replicas: {value}") + 1
    assert _count(p) == f"error: {p}:{line}: ws_replicas: {got}\n"


@pytest.mark.parametrize("old, new, field, got", [
    ("  tile_m: [32, 64, 128]", "  tile_m: [32, 64, 4096]", "ladder.tile_m[2]",
     "must be in [16, 1024], got 4096"),
    ("  tile_n: [32, 64, 128]", "  tile_n: [8, 64]", "ladder.tile_n[0]",
     "must be in [16, 1024], got 8"),
    ("  warp_m: [1, 2, 4]", "  warp_m: [1, 2, 64]", "ladder.warp_m[2]",
     "must be in [1, 32], got 64"),
    ("  warp_n: [1, 2, 4]", "  warp_n: [1, 2, 3, 4, 5, 6, 7, 8, 9]", "ladder.warp_n",
     "at most 8 items, got 9"),
    ("  max_block_size: 256", "  max_block_size: 100000", "filters.max_block_size",
     "must be in [1, 1024], got 100000"),
    ("  min_block_size: 32", "  min_block_size: 512", "filters.min_block_size",
     "512 exceeds max_block_size 256"),
    ("  max_k_steps: 2", "  max_k_steps: 2.5", "filters.max_k_steps",
     "expected an integer in [1, 64], got a float 2.5"),
    ("  max_loads_per_thread: 40", "  max_loads_per_thread: 1e9", "filters.max_loads_per_thread",
     "expected an integer in [1, 4096], got a string '1e9'"),
    ("      max_loads_per_thread: 192", "      max_loads_per_thread: false",
     "filters.targets.gfx1250.max_loads_per_thread",
     "expected an integer in [1, 4096], got a boolean false"),
    ("        - [32, 64, 64, 1, 1, 8, 8]", "        - [32, 64, 64, 1, 1, 8, 16]",
     "filters.targets.sm_90.exclude[0][6]", "must be in [1, 8], got 16"),
    ("        - [64, 128, 32, 2, 2, 8, 1]", "        - [64, 128, 32, 2, 2, 8]",
     "filters.targets.sm_90.exclude[1]",
     "expected 7 integers [tile_m, tile_n, tile_k, warp_m, warp_n, vec_a, vec_b], got 6"),
    ("        - [64, 128, 32, 2, 2, 8, 1]", "        - [32, 64, 64, 1, 1, 8,  8]",
     "filters.targets.sm_90.exclude[1]", "repeated entry [32, 64, 64, 1, 1, 8, 8]"),
    ("        - [64, 32, 64, 2, 1, 8, 1]", "        - [64, 32, 64, 2, 64, 8, 1]",
     "filters.targets.sm_90.exclude[2][4]", "must be in [1, 32], got 64"),
    ("        - [64, 64, 32, 4, 1, 8, 1]", "        - 7", "filters.targets.sm_90.exclude[3]",
     "expected a list, got an integer 7"),
    ("        - [64, 32, 32, 2, 1, 4, 4]", "        - [64, 32, 32, 2, 1, 4, 32]",
     "filters.targets.sm_90.exclude_async[0][6]", "must be in [1, 16], got 32"),
    ("        - [32, 64, 64, 2, 2, 4, 4]", "        - [32, 64, 64, 2, 2, 4]",
     "filters.targets.sm_90.exclude_async[1]",
     "expected 7 integers [tile_m, tile_n, tile_k, warp_m, warp_n, chunk_a, chunk_b], got 6"),
    ("        - [32, 64, 64, 2, 2, 4, 4]", "        - [64, 32, 32, 2, 1, 4,  4]",
     "filters.targets.sm_90.exclude_async[1]", "repeated entry [64, 32, 32, 2, 1, 4, 4]"),
    ("        - [32, 64, 64, 2, 2, 4, 4]", "        - '4x4'",
     "filters.targets.sm_90.exclude_async[1]", "expected a list, got a string '4x4'"),
    ("  - [8, 1]", "  - [8, 64]", "vec_pairs[2][1]", "must be in [1, 8], got 64"),
    ("  - [16, 16]", "  - [16, 4096]", "async_chunk_pairs[0][1]", "must be in [1, 16], got 4096"),
    ("  - geometry: [32, 32, 32, 1, 1]", "  - geometry: [32, 32, 32, 1, -1]",
     "cover[0].geometry[4]", "must be in [1, 32], got -1"),
    ("    reason: depthwise and small grouped layers (kpg, cpg <= 32), one wave",
     "    reason: 32", "cover[0].reason", "expected a string, got an integer 32"),
    ("  default: [fp16, bf16]", "  default: [fp16, fp16]", "dtypes.default[1]",
     "repeated 'fp16'"),
    ("schema: 1", "schema: 99999999999999", "schema", "must be in [1, 1048576], got "
     "99999999999999"),
])
def test_numeric_bounds_and_types_name_the_range(tmp_path, old, new, field, got):
    assert old in SHIPPED
    text = SHIPPED.replace(old, new, 1)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith(new))
    p = tmp_path / "g.yaml"
    p.write_text(text)
    assert _count(p) == f"error: {p}:{line}: {field}: {got}\n"


def test_a_long_unknown_key_is_quoted_short(tmp_path):
    key = "k" * 500_000
    p = tmp_path / "g.yaml"
    p.write_text(f"? {key}\n: 1\n")  # explicit: libyaml caps implicit keys at 1024
    out = _count(p)
    assert out.startswith(f"error: {p}:1: '{'k' * 60}'... (500000 characters): unknown key; ")
    assert len(out) < len(str(p)) + 300


def test_a_key_with_a_newline_stays_on_one_line(tmp_path):
    p = tmp_path / "g.yaml"
    p.write_text('"a\\nb": 1\n')
    assert _count(p) == f"error: {p}:1: 'a\\nb': unknown key; valid: schema, ladder, " \
                        "ladder_wave64, ladder_targets, filters, cta_orders, stages, vec_pairs, " \
                        "async_chunk_pairs, " \
                        "ws_replicas, dtypes, cover, depthwise, small_c\n"


def test_python_tags_are_only_text(tmp_path):
    p = tmp_path / "g.yaml"
    text = SHIPPED.replace("ws_replicas: 8", "ws_replicas: !!python/object/apply:os.system [id]")
    p.write_text(text)
    line = text.splitlines().index("ws_replicas: !!python/object/apply:os.system [id]") + 1
    assert _count(p) == f"error: {p}:{line}: ws_replicas: expected an integer in [1, 128], " \
                        "got a list\n"


def test_geometry_errors_are_the_documented_class():
    with pytest.raises(GeometryFileError):
        load("/dev/null")


# ---- the refresh plan ---------------------------------------------------------------------

@pytest.mark.parametrize("text, line, got", [
    ("targets: [gfx1250, gfx1250]\n", 1, "targets[1]: repeated 'gfx1250'"),
    ("targets: [7]\n", 1, "targets[0]: expected a name, got an integer 7"),
    ("targets: [gfx1250]\nverify: {sample: half}\n", 2,
     "verify.sample: expected a number in (0, 1], got a string 'half'"),
    ("targets: [gfx1250]\nverify: {sample: 0}\n", 2, "verify.sample: must be in (0, 1], got 0"),
    ("targets: [gfx1250]\nverify: {sample: .nan}\n", 2,
     "verify.sample: expected a decimal number in (0, 1], got .nan"),
    ("targets: [gfx1250]\nverify: {sample: true}\n", 2,
     "verify.sample: expected a number in (0, 1], got a boolean true"),
    ("targets: [gfx1250]\nverify: {level: [numerics]}\n", 2,
     "verify.level: expected a string, got a list"),
    ("targets: [gfx1250]\nverify: {levels: numerics}\n", 2,
     "verify.levels: unknown key; valid: level, sample"),
    ("targets: [gfx1250]\nverify: numerics\n", 2,
     "verify: expected a mapping, got a string 'numerics'"),
    ("targets: [gfx1250]\njob_timeout: 1e999\n", 2,
     "job_timeout: expected a number in [1, 86400], got a string '1e999'"),
    ("targets: [gfx1250]\njob_timeout: .inf\n", 2,
     "job_timeout: expected a decimal number in [1, 86400], got .inf"),
    ("targets: [gfx1250]\njob_timeout: 99999999\n", 2,
     "job_timeout: must be in [1, 86400], got 99999999"),
    ("targets: [gfx1250]\njob_timeout: 0.5\n", 2, "job_timeout: must be in [1, 86400], got 0.5"),
    ("targets: [gfx1250]\njob_timeout: '300'\n", 2,
     "job_timeout: expected a number in [1, 86400], got a string '300'"),
    ("targets: [gfx1250]\nmax_size: [4G]\n", 2, "max_size: expected a size such as 4G, got a list"),
    ("targets: [gfx1250]\nmax_size: true\n", 2,
     "max_size: expected a size such as 4G, got a boolean true"),
    ("targets: [gfx1250]\nmax_size: 0\n", 2,
     "max_size: must be at least 1 byte (leave it out for no bound)"),
    ("- gfx1250\n", 1, "<top>: expected a mapping, got a list"),
    ("targets: [gfx1250]\ntargets: [gfx1201]\n", 2, "targets: duplicate key"),
])
def test_plan_types_and_bounds(tmp_path, text, line, got):
    p = tmp_path / "plan.yaml"
    p.write_text(text)
    assert _refresh(p, tmp_path) == f"error: {p}:{line}: {got}\n"
    with pytest.raises(PlanError) as e:
        load_plan(p)
    assert str(e.value) == f"{p}:{line}: {got}"


def test_plan_max_size_above_one_exbibyte(tmp_path):
    p = tmp_path / "plan.yaml"
    p.write_text("targets: [gfx1250]\nmax_size: 9999999T\n")
    out = _refresh(p, tmp_path)
    assert out.startswith(f"error: {p}:2: max_size: size '9999999T'"), out
