"""Value.key: the structural hash is linear in the size of the DAG, not in its paths."""

from __future__ import annotations

import hashlib
import pickle
import time

from wgradcache.kernel.ir import Ops, Value, i32


def _chain(depth: int, seed: int = 1, first_id: int = 0) -> Value:
    """x_{i+1} = x_i + x_i: 2^depth paths from the root to the constant, depth + 1 nodes."""
    v = Value(Ops.CONST, i32, (), seed, first_id)
    for i in range(depth):
        v = Value(Ops.ADD, i32, (v, v), None, first_id + i + 1)
    return v


def _naive_key(v: Value) -> bytes:
    """The definition, re-hashing every source on every path (exponential on a DAG)."""
    h = hashlib.sha256(f"{v.op.name}|{v.dtype!r}|{v.arg!r}".encode())
    for s in v.src:
        h.update(_naive_key(s))
    return h.digest()


def test_key_is_the_structural_hash():
    shallow = _chain(6)
    assert shallow.key == _naive_key(shallow)
    mixed = Value(Ops.SUB, i32, (shallow, _chain(2, seed=3)), None, 99)
    assert mixed.key == _naive_key(mixed)


def test_deep_shared_dag_keys_promptly():
    start = time.perf_counter()
    a, b = _chain(200), _chain(200, first_id=1000)  # same structure, other SSA ids
    c = _chain(200, seed=2)  # one leaf differs
    assert a.key == b.key
    assert a.key != c.key
    assert a.key != a.src[0].key  # each level hashes differently
    assert time.perf_counter() - start < 1.0  # 2^200 hashes before memoising


def test_key_deeper_than_the_recursion_limit():
    deep = _chain(5000)
    assert deep.key == _chain(5000, first_id=7).key


def test_key_survives_pickle():
    v = _chain(30)
    key = v.key
    assert pickle.loads(pickle.dumps(v)).key == key
