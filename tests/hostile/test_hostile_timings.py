"""Hostile timings files and --out paths for ``wgradcache cover``: each is one line on
stderr and exit code 2, never a traceback, never a blocked read, never a write elsewhere.

Runs under a 60 s alarm and 1 GiB more address space (as the YAML tests), so a reader
that waited on a FIFO or read a huge file whole fails instead of taking the suite.
"""

from __future__ import annotations

import json
import os
import resource
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import tune_doc
from wgradcache.cli import main
from wgradcache.jobs.timings import MAX_FILE_BYTES, MAX_ROWS

GOOD_ROW = {"layer": "net/a", "problem": "32,64,56,56,64,1,1", "dtype": "fp16", "rank": 1,
            "label": "sm_90-fp16-t64x64x32-w2x2-v8x8-sync-default-none",
            "geometry": [64, 64, 32, 2, 2], "split_k": 1, "reduction": "none", "ms": 0.5,
            "tflops": 10.0}


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
        raise TimeoutError("the reader blocked (60 s alarm)")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _refused(args: list[str]) -> str:
    """The one stderr line of a refused run (exit 2), without the ``error: `` prefix."""
    r = CliRunner().invoke(main, ["cover", *args])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and r.output.startswith("error: "), r.output[:500]
    assert "Traceback" not in r.output
    return r.output[len("error: "):].rstrip("\n")


def _file(tmp: Path, content: str | bytes) -> Path:
    p = tmp / "t.json"
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    return p


def _doc(**row_changes) -> str:
    row = {**GOOD_ROW, **row_changes}
    return json.dumps({"timings": [{k: v for k, v in row.items() if v is not _DROP}]})


_DROP = object()


def test_the_good_row_is_accepted(tmp_path):
    r = CliRunner().invoke(main, ["cover", "--timings", str(_file(tmp_path, _doc()))])
    assert r.exit_code == 0, r.output


def test_truncated_json(tmp_path):
    p = _file(tmp_path, _doc()[:-7])
    assert _refused(["--timings", str(p)]).startswith(f"{p}:1: not valid JSON: ")


def test_oversized_file_is_refused_before_reading(tmp_path):
    p = tmp_path / "t.json"
    with open(p, "wb") as f:  # sparse: no disk, and a reader that read it whole would OOM
        f.truncate(MAX_FILE_BYTES + 1)
    assert _refused(["--timings", str(p)]) == \
        f"{p}: larger than {MAX_FILE_BYTES} bytes (the cap on a timings file)"


def test_not_utf8_and_deep_nesting_and_repeated_keys(tmp_path):
    p = _file(tmp_path, b'{"timings": "\xff"}')
    assert _refused(["--timings", str(p)]) == f"{p}: not UTF-8 (offset 13)"
    p = _file(tmp_path, "[" * 100_000 + "]" * 100_000)
    assert _refused(["--timings", str(p)]) == f"{p}: not valid JSON: nested too deep"
    p = _file(tmp_path, '{"timings": [], "timings": []}')
    assert _refused(["--timings", str(p)]) == f"{p}: not valid JSON: repeated key 'timings'"


@pytest.mark.parametrize("text, why", [
    ("[]", "expected a JSON object with 'timings', got list"),
    ("{}", "timings: expected a list of rows, got nothing"),
    ('{"timings": {}}', "timings: expected a list of rows, got dict"),
    ('{"timings": []}', "timings: no rows (nothing was measured)"),
    ('{"timings": [1]}', "timings[0]: expected an object, got int"),
    ('{"timings": [{}], "layers": {}}', "layers: expected a list of at most 100000 rows"),
])
def test_wrong_top_level_shapes(tmp_path, text, why):
    p = _file(tmp_path, text)
    assert _refused(["--timings", str(p)]) == f"{p}: {why}"


def test_too_many_rows(tmp_path):
    p = _file(tmp_path, json.dumps({"timings": [0] * (MAX_ROWS + 1)}))
    assert _refused(["--timings", str(p)]) == f"{p}: timings: {MAX_ROWS + 1} rows, more " \
                                              f"than {MAX_ROWS}"


@pytest.mark.parametrize("changes, why", [
    ({"ms": -1.0}, "timings[0].ms: expected milliseconds in (0, 1e+06], got -1.0"),
    ({"ms": 0}, "timings[0].ms: expected milliseconds in (0, 1e+06], got 0"),
    ({"ms": "0.5"}, "timings[0].ms: expected milliseconds in (0, 1e+06], got '0.5'"),
    ({"ms": True}, "timings[0].ms: expected milliseconds in (0, 1e+06], got True"),
    ({"ms": _DROP}, "timings[0]: missing field 'ms'"),
    ({"tflops": -2}, "timings[0].tflops: expected a finite number >= 0, got -2"),
    ({"split_k": True}, "timings[0].split_k: expected an integer in [1, 128], got True"),
    ({"split_k": 129}, "timings[0].split_k: expected an integer in [1, 128], got 129"),
    ({"rank": 0}, "timings[0].rank: expected an integer in [1, 100000], got 0"),
    ({"extra": 1}, "timings[0]: unknown field 'extra'; valid: dtype, geometry, label, layer, "
                   "ms, problem, rank, reduction, split_k, tflops"),
    ({"layer": "a\nb"}, "timings[0].layer: expected a layer name (1 to 100 of A-Z a-z 0-9 _ "
                        ". : / + -), got 'a\\nb'"),
    ({"layer": 7}, "timings[0].layer: expected a layer name (1 to 100 of A-Z a-z 0-9 _ . : / "
                   "+ -), got 7"),
    ({"problem": "1,2,3"}, "timings[0].problem: problem has 3 fields; expected "
                           "N,C,H,W,K,Y,X[,stride,pad,dilation,groups] (7 to 11)"),
    ({"label": "rm -rf /"}, "timings[0].label: not a kernel label: 'rm -rf /'"),
    ({"label": "sm_91-fp16-t64x64x32-w2x2-v8x8-sync-default-none"},
     "timings[0].label: unknown target 'sm_91'; valid: gfx1250, gfx1201, gfx1151, gfx950, "
     "gfx942, sm_90"),
    ({"dtype": "bf16"}, "timings[0].dtype: 'bf16' is not the label's dtype fp16"),
    ({"geometry": [64, 64, 32, 2]},
     "timings[0].geometry: [64, 64, 32, 2] is not the label's geometry [64, 64, 32, 2, 2]"),
    ({"geometry": [64, 64, 32, 2, True]},
     "timings[0].geometry: [64, 64, 32, 2, True] is not the label's geometry "
     "[64, 64, 32, 2, 2]"),
    ({"reduction": "atomic"}, "timings[0].reduction: 'atomic' is not the label's reduction "
                              "none"),
])
def test_wrong_fields(tmp_path, changes, why):
    p = _file(tmp_path, _doc(**changes))
    assert _refused(["--timings", str(p)]) == f"{p}: {why}"


def test_nan_and_infinity_literals(tmp_path):
    for lit in ("NaN", "Infinity", "-Infinity"):
        p = _file(tmp_path, _doc().replace('"ms": 0.5', f'"ms": {lit}'))
        assert _refused(["--timings", str(p)]) == \
            f"{p}: not valid JSON: {lit} is not a number this file may hold"
    p = _file(tmp_path, _doc().replace('"ms": 0.5', '"ms": 1e999'))  # parses to inf
    assert _refused(["--timings", str(p)]) == \
        f"{p}: timings[0].ms: expected milliseconds in (0, 1e+06], got inf"


def test_a_geometry_the_cover_rule_refuses(tmp_path):
    p = _file(tmp_path, _doc(label="sm_90-fp16-t256x256x32-w2x2-v8x8-sync-default-none",
                             geometry=[256, 256, 32, 2, 2]))
    line = _refused(["--timings", str(p)])
    assert line.startswith(f"{p}: timings[0].label: geometry [256, 256, 32, 2, 2] is no "
                           "cover geometry of sm_90 in ")
    assert line.endswith("(fp16: 512 accumulator registers per lane exceed the budget 128)")


def test_mixed_targets_and_inconsistent_problems(tmp_path):
    amd = {**GOOD_ROW, "label": "gfx1250-fp16-t64x64x32-w2x2-v8x8-sync-default-none"}
    p = _file(tmp_path, json.dumps({"timings": [GOOD_ROW, amd]}))
    assert _refused(["--timings", str(p)]) == \
        f"{p}: timings[1].label: target gfx1250, but the rows before are sm_90 (one " \
        "target per file)"
    other = {**GOOD_ROW, "problem": "32,64,56,56,64,3,3"}
    p = _file(tmp_path, json.dumps({"timings": [GOOD_ROW, other]}))
    assert _refused(["--timings", str(p)]) == \
        f"{p}: timings[1].problem: 32,64,56,56,64,3,3 for net/a, which rows before give " \
        "as 32,64,56,56,64,1,1"


def test_a_directory_a_fifo_and_links(tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    assert _refused(["--timings", str(d)]) == f"--timings {d}: a directory, not a file"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: an open without O_NONBLOCK would wait for ever
    assert _refused(["--timings", str(fifo)]) == \
        f"{fifo}: cannot read: a FIFO, not a regular file"
    to_fifo = tmp_path / "to_fifo"
    to_fifo.symlink_to(fifo)
    assert _refused(["--timings", str(to_fifo)]) == \
        f"{to_fifo}: cannot read: a FIFO, not a regular file"
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    assert _refused(["--timings", str(dangling)]) == \
        f"{dangling}: cannot read: No such file or directory"
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert _refused(["--timings", str(loop)]) == \
        f"{loop}: cannot read: Too many levels of symbolic links"
    assert _refused(["--timings", "/dev/zero"]) == \
        "/dev/zero: cannot read: a character device, not a regular file"
    # A link to a regular file is a file the user named (as --geometries): followed.
    good = _file(tmp_path, _doc())
    link = tmp_path / "link.json"
    link.symlink_to(good)
    assert CliRunner().invoke(main, ["cover", "--timings", str(link)]).exit_code == 0


def test_traversal_and_missing_paths(tmp_path):
    far = "../../../../../../../../nonexistent/t.json"
    assert _refused(["--timings", far]) == f"{far}: cannot read: No such file or directory"


def test_out_never_writes_through_a_link_or_onto_a_directory(tmp_path):
    good = str(_file(tmp_path, _doc()))
    secret = tmp_path / "secret"
    secret.write_text("keep\n")
    link = tmp_path / "out.yaml"
    link.symlink_to(secret)
    assert _refused(["--timings", good, "--out", str(link)]) == \
        f"--out {link}: cannot write: a symbolic link, not a regular file"
    assert secret.read_text() == "keep\n" and link.is_symlink()
    d = tmp_path / "outdir"
    d.mkdir()
    assert _refused(["--timings", good, "--out", str(d)]) == \
        f"--out {d}: a directory, not a file"
    far = str(tmp_path / "../../../../../../../../../nonexistent/cover.yaml")
    assert _refused(["--timings", good, "--out", far]) == \
        f"--out {far}: cannot write: No such file or directory"
    under_file = str(secret / "cover.yaml")
    assert _refused(["--timings", good, "--out", under_file]) == \
        f"--out {under_file}: cannot write: Not a directory"
    assert sorted(os.listdir(tmp_path)) == ["out.yaml", "outdir", "secret", "t.json"]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".wgradcache-")]


@pytest.mark.parametrize("args, why", [
    (["--size", "0"], "--size '0': expected an integer in [1, 256]"),
    (["--size", "257"], "--size '257': expected an integer in [1, 256]"),
    (["--size", "\uff11\uff19"], "--size '\uff11\uff19': expected an integer in [1, 256]"),
    (["--factor", "0.5"], "--factor '0.5': expected a finite number in [1, 100]"),
    (["--factor", "nan"], "--factor 'nan': expected a finite number in [1, 100]"),
    (["--factor", "inf"], "--factor 'inf': expected a finite number in [1, 100]"),
])
def test_bad_options(tmp_path, args, why):
    good = str(_file(tmp_path, _doc()))
    assert _refused(["--timings", good, *args]) == why


# -- tune --import: timings measured elsewhere, checked against the cache ------------------
@pytest.fixture
def import_cache(small_cache, tmp_path):
    import shutil

    dst = tmp_path / "cache"
    shutil.copytree(small_cache["cache"], dst)
    return dst


def _import_refused(cache, path, *extra) -> str:
    r = CliRunner().invoke(main, ["tune", "--import", str(path), "--cache-dir", str(cache),
                                  *extra])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and r.output.startswith("error: "), r.output[:500]
    assert not (cache / "gfx1250" / "timings").exists()  # nothing imported
    return r.output[len("error: "):].rstrip("\n")


def _set(doc: dict, path: str, value) -> dict:
    *head, last = path.split(".")
    d = doc
    for k in head:
        d = d[int(k)] if k.isdigit() else d[k]
    d[last] = value
    return doc


@pytest.mark.parametrize("path, value, why", [
    ("rows.0.median_ms", -1.0, "rows[0].median_ms: -1.0 is not a number in (0, 1e+06]"),
    ("rows.0.median_ms", 1e7, "rows[0].median_ms: 10000000.0 is not a number in (0, 1e+06]"),
    ("rows.0.median_ms", "0.5", "rows[0].median_ms: 0.5 is not a number in (0, 1e+06]"),
    ("rows.0.degree", 1.0, "rows[0].degree: 1.0 is not an integer in [1, 65535]"),
    ("rows.0.evil", 1, "rows[0]: unknown field 'evil'"),
    ("evil", 1, "file: unknown field 'evil'"),
    ("rows", {}, "rows: dict, not a list"),
    ("device.name", "../../etc/x", "device.name: '../../etc/x' is not a device name (1 to 100 "
                                   "of A-Z a-z 0-9 space . _ ( ) + -)"),
    ("rows.0.blob", "ab" * 32, "rows[0].blob: abababababababab is not the blob of "
                               "gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none here"),
    ("rows.0.identity_key", "cd" * 32, "rows[0]: kernel cdcdcdcdcdcdcdcd is not in this "
                                       "cache's gfx1250 entries"),
    ("rows.0.problem", "2,12,8,8,32,3,3,1,1", "rows[0]: gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-"
                                              "default-none does not serve 2,12,8,8,32,3,3,1,1 at "
                                              "split 1: vec_b 8 does not divide cpg=12"),
    ("rows.0.degree", 2, "rows[0]: gfx1250-fp16-t32x32x32-w1x1-v8x8-sync-default-none does "
                         "not serve 2,32,8,8,32,3,3,1,1 at split 2: split degree 2 needs a "
                         "split-K kernel (reduction is none)"),
    ("target", "../gfx1250", "target: "),
    ("remaining", -1, "remaining: -1 is not a count in [0, 20000000]"),
    ("already_measured", 1.5, "already_measured: 1.5 is not a count in [0, 20000000]"),
    ("remaining_layers", 10**30, "remaining_layers: 1000000000000000000000000000000 is not "
                                 "a count"),
])
def test_import_refuses_a_bad_value_in_one_line(import_cache, tmp_path, path, value, why):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_set(tune_doc(import_cache), path, value)))
    assert _import_refused(import_cache, p).startswith(f"{p}: {why}")


def test_import_refuses_nan_infinity_truncation_and_a_million_rows(import_cache, tmp_path):
    good = json.dumps(tune_doc(import_cache))
    p = tmp_path / "t.json"
    for lit in ("NaN", "Infinity"):
        p.write_text(good.replace('"median_ms": 0.5', f'"median_ms": {lit}'))
        assert _import_refused(import_cache, p) == \
            f"{p}: not valid JSON: {lit} is not a number this file may hold"
    p.write_text(good.replace('"median_ms": 0.5', '"median_ms": 1e999'))
    assert _import_refused(import_cache, p) == \
        f"{p}: rows[0].median_ms: inf is not a number in (0, 1e+06]"
    p.write_text(good[:len(good) // 2])
    assert _import_refused(import_cache, p).startswith(f"{p}:1: not valid JSON: ")
    doc = tune_doc(import_cache)
    doc["rows"] = [{}] * 10 ** 6  # 3 MB: under the size cap, refused by its count first
    p.write_text(json.dumps(doc))
    assert _import_refused(import_cache, p) == f"{p}: rows: 1000000 rows, more than 200000"
    p.write_text(good.replace('"vendor"', '"rows"'))
    assert _import_refused(import_cache, p) == f"{p}: not valid JSON: repeated key 'rows'"


def test_import_refuses_a_fifo_a_symlink_and_a_huge_file(import_cache, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: an open without O_NONBLOCK would wait for ever
    assert _import_refused(import_cache, fifo) == \
        f"{fifo}: cannot read: a FIFO, not a regular file (not followed)"
    good = tmp_path / "good.json"
    good.write_text(json.dumps(tune_doc(import_cache)))
    link = tmp_path / "link.json"
    link.symlink_to(good)
    assert _import_refused(import_cache, link) == \
        f"{link}: cannot read: a symbolic link, not a regular file (not followed)"
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(1 << 36)  # 64 GB, sparse: never read
    assert _import_refused(import_cache, huge) == \
        f"{huge}: cannot read: {1 << 36} bytes, over the 96 MiB cap"
    assert _import_refused(import_cache, tmp_path / "nowhere.json") == \
        f"{tmp_path / 'nowhere.json'}: cannot read: No such file or directory"


def test_import_refuses_a_device_class_that_is_no_slug(import_cache, tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(tune_doc(import_cache)))
    assert _import_refused(import_cache, p, "--device-class", "../../x") == (
        "--device-class '../../x': not a device class (<name>-<12 hex digits>: a file name "
        "under <target>/timings/)")
