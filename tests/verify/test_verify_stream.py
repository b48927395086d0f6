"""verify --stream: each entry's numerics result is a JSON line the moment it is decided, the
same rows --json prints at the end; a run cut short keeps the lines it wrote; a path that
cannot be written is one line and nothing runs."""

from __future__ import annotations

import json

from click.testing import CliRunner

from wgradcache.cli import main

PROBLEM = "1,8,5,7,8,3,3,1,1"  # small: every gfx1250 fp16/bf16 entry of the cache serves it


def _verify(c, *args):
    return CliRunner().invoke(main, ["verify", "--from-cache", "--cache-dir", str(c["cache"]),
                                     "--geometries", str(c["geometries"]), "--level",
                                     "numerics", "--no-reproduce", "--problem", PROBLEM,
                                     "--sample", "0.4", *args])


def _lines(path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines()]


def test_stream_holds_the_json_report_rows_in_order(small_cache, tmp_path):
    out = tmp_path / "results.jsonl"
    r = _verify(small_cache, "--json", "--stream", str(out))
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, doc["failures"]
    assert 3 <= len(doc["numerics"]) < 18  # the sample
    assert _lines(out) == doc["numerics"]
    assert all(n["status"] == "passed" and n["runs"][0]["problem"] == PROBLEM
               for n in doc["numerics"])


def test_a_run_cut_short_keeps_the_lines_it_wrote(small_cache, tmp_path, monkeypatch):
    import wgradcache.pipeline.verify as pv

    real, calls = pv.run_entry, []

    def dies_on_the_third(*a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as a timeout's SIGINT would
        return real(*a, **kw)

    monkeypatch.setattr(pv, "run_entry", dies_on_the_third)
    out = tmp_path / "results.jsonl"
    r = _verify(small_cache, "--stream", str(out))
    assert r.exit_code != 0
    got = _lines(out)
    assert len(got) == 2 and {n["status"] for n in got} == {"passed"}
    assert all(set(n) == {"key", "label", "status", "degrees", "runs"} for n in got)


def test_a_stream_path_that_cannot_be_written_is_one_line(small_cache, tmp_path, monkeypatch):
    import wgradcache.pipeline.verify as pv

    def never(*a, **kw):
        raise AssertionError("verify ran")

    monkeypatch.setattr(pv, "verify", never)
    r = _verify(small_cache, "--stream", str(tmp_path))
    assert (r.exit_code, r.stderr) == (2, f"error: --stream {tmp_path}: a directory, not a "
                                          "file\n")
    missing = tmp_path / "no" / "such" / "r.jsonl"
    r = _verify(small_cache, "--stream", str(missing))
    assert (r.exit_code, r.stderr) == (2, f"error: --stream {missing}: cannot write: No "
                                          "such file or directory\n")
