"""Hypothesis mutations of the shipped geometries.yaml: the loader loads or raises the one
documented error, a one-line GeometryFileError that names the file and quotes little."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wgradcache.jobs.geometries import GeometryFileError, JobData, default_path, load

SHIPPED = default_path().read_text()
DOC = yaml.safe_load(SHIPPED)
# Replacements for a scalar: the types and sizes a hand edit or an attacker would try.
HOSTILE = st.one_of(
    st.integers(-(2 ** 70), 2 ** 70),
    st.sampled_from([0, -1, 1, 3, 17, 1099511627776, 10 ** 400]),
    st.text(max_size=20), st.text(min_size=5000, max_size=5001, alphabet="x9"),
    st.booleans(), st.floats(allow_nan=True), st.none(),
    st.lists(st.integers(0, 64), max_size=3), st.dictionaries(st.text(max_size=3),
                                                              st.integers(), max_size=2),
)


def _paths(node, prefix=()):
    """Every (path, value) in the parsed document, containers too."""
    yield prefix, node
    items = node.items() if isinstance(node, dict) else \
        enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        yield from _paths(v, (*prefix, k))


PATHS = [p for p, _ in _paths(DOC) if p]


def _set(doc, path, value=None, delete=False):
    import copy

    doc = copy.deepcopy(doc)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return yaml.safe_dump(doc, sort_keys=False)


@st.composite
def mutated(draw) -> str:
    kind = draw(st.sampled_from(["delete", "retype", "duplicate", "alias", "truncate",
                                 "insert_line"]))
    lines = SHIPPED.splitlines(keepends=True)
    if kind == "delete":
        return _set(DOC, draw(st.sampled_from(PATHS)), delete=True)
    if kind == "retype":
        return _set(DOC, draw(st.sampled_from(PATHS)), draw(HOSTILE))
    if kind == "duplicate":  # a key (or list item) line twice
        keyed = [i for i, ln in enumerate(lines) if ":" in ln and not ln.lstrip().startswith("#")]
        i = draw(st.sampled_from(keyed))
        return "".join(lines[:i + 1] + lines[i:])
    if kind == "alias":  # an anchor on one value, an alias to it in another's place
        text = SHIPPED.replace("  tile_m: [32, 64, 128]", "  tile_m: &t [32, 64, 128]", 1)
        target = draw(st.sampled_from(["  tile_n: [32, 64, 128]", "ws_replicas: 8",
                                       "  max_block_size: 256", "  - [8, 8]"]))
        return text.replace(target, target.split(":")[0].split("[")[0] + (
            ": *t" if ":" in target else "*t"), 1)
    if kind == "insert_line":
        i = draw(st.integers(0, len(lines)))
        junk = draw(st.sampled_from(["- [", "  : :", "\t", "x: {", "&a", "*zz\n", "'", "%YAML 9\n",
                                     "!!python/object:os.system x\n", "---\n"]))
        return "".join(lines[:i] + [junk + "\n"] + lines[i:])
    return SHIPPED[:draw(st.integers(0, len(SHIPPED)))]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated())
def test_a_mutated_file_loads_or_is_one_documented_line(text):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "g.yaml"
        p.write_text(text)
        try:
            data = load(p)
        except GeometryFileError as e:
            msg = str(e)
            assert msg.startswith(f"{p}:"), msg
            assert "\n" not in msg and len(msg) < len(str(p)) + 400, msg
        else:
            assert isinstance(data, JobData)
