"""benchmarks/select_vs_measured.py: exact lines on a constructed two-kernel file, and one
line with exit 2 on a bad file (the reader is jobs/timings.py's, hostile-tested there)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "select_vs_measured.py"


def _main():
    spec = importlib.util.spec_from_file_location("select_vs_measured", _SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def _row(label, geometry, rank, ms):
    return {"layer": "resnet50/l1.conv1", "problem": "32,256,56,56,64,1,1", "dtype": "fp16",
            "rank": rank, "label": label, "geometry": geometry, "split_k": 64,
            "reduction": "atomic", "ms": ms}


def test_rerank_of_two_measured_kernels(tmp_path, capsys):
    # recorded rank 1 is the cshuffle twin (1.7x slower); the model now picks the default one
    rows = [_row("sm_90-fp16-t128x64x32-w2x2-v8x8-sync-cshuffle-atomic", [128, 64, 32, 2, 2],
                 1, 0.17),
            _row("sm_90-fp16-t128x64x32-w2x2-v8x8-sync-default-atomic", [128, 64, 32, 2, 2],
                 2, 0.10)]
    p = tmp_path / "speed.json"
    p.write_text(json.dumps({"timings": rows}))
    assert _main()([str(p)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "fp16  resnet50/l1.conv1            before  1.70  after  1.00  "
        "sm_90-fp16-t128x64x32-w2x2-v8x8-sync-default-atomic",
        "fp16: before (recorded ranks): within 1.2x on 0% of layers, mean sel/best 1.700",
        "fp16: after (current model):   within 1.2x on 100% of layers, mean sel/best 1.000"]


def test_bad_file_is_one_line_and_exit_2(tmp_path, capsys):
    p = tmp_path / "speed.json"
    p.write_text('{"timings": [')
    assert _main()([str(p)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {p}:1: not valid JSON: Expecting value\n"
    assert _main()([]) == 2
    assert _main()([str(p), "--cache", "x"]) == 2
