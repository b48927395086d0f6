"""Read a YAML file nobody has checked, and its typed fields, in bounded time and memory.

Geometries files and refresh plans come from users, CI artifacts and other machines, so a
file is input, not configuration. PyYAML alone turned a 4.9 KB alias bomb into a 279 MB
error line (the node was printed whole), raised RecursionError at 2000 nested ``[``, and
reads a FIFO or ``/dev/zero`` forever. Here, before anything is composed:

* the file is opened ``O_NONBLOCK`` and must be a regular file by ``fstat`` of the open
  descriptor (a symlink to a regular file is followed; to a FIFO, a device or a directory
  it is refused, with no window between the check and the read); at most
  ``MAX_FILE_BYTES`` + 1 bytes are read, and the text must be UTF-8;
* one pass over libyaml's event stream refuses every alias (an anchor alone expands
  nothing and is allowed), nesting deeper than ``MAX_DEPTH`` and more than ``MAX_NODES``
  nodes, so the composer that follows (recursive, in C) only sees a small tree;
* every error is one line, ``file:line: field: reason``, and quotes at most
  ``QUOTE_CHARS`` characters of any value or key.

``NodeReader`` reads typed fields from the composed nodes (which keep their line numbers):
integers are ASCII decimal digits in a stated range (no ``0x``, ``1_000`` or ``1:30``, which
YAML 1.1 also reads as integers), and a value of the wrong type is named by its kind
("got a string 'sixty'", "got a boolean true", "got null", "got a list").
"""

from __future__ import annotations

import math
import re

import yaml

from wgradcache.files.capped import Refused
from wgradcache.files.capped import read_capped as _read_file

__all__ = ["MAX_FILE_BYTES", "MAX_DEPTH", "MAX_NODES", "QUOTE_CHARS", "NodeReader", "clip",
           "read_capped"]

MAX_FILE_BYTES = 1 << 20  # the shipped geometries.yaml is 5 KB, the nightly plan 0.3 KB
MAX_DEPTH = 16  # collections inside collections; geometries.yaml needs 4, a plan 2
MAX_NODES = 20_000  # scalars + collections; the shipped geometries.yaml has about 300
QUOTE_CHARS = 200  # of a value or key quoted in an error

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it
_T = "tag:yaml.org,2002:"
_KINDS = {f"{_T}int": "an integer", f"{_T}float": "a float", f"{_T}bool": "a boolean",
          f"{_T}null": "null", f"{_T}str": "a string", f"{_T}timestamp": "a date",
          f"{_T}binary": "binary data"}
_DECIMAL = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?(?:[0-9]{1,40}(?:\.[0-9]{0,40})?|\.[0-9]{1,40})(?:[eE][-+]?[0-9]{1,4})?")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def clip(text: object, limit: int = QUOTE_CHARS) -> str:
    """``repr`` of at most ``limit`` characters of ``text``, saying how long a longer one was:
    one line whatever the text holds (control characters are escaped)."""
    s = str(text)
    if len(s) <= limit:
        return repr(s)
    return f"{s[:limit]!r}... ({len(s)} characters)"


def _plain(text: str, limit: int = 60) -> str:
    """``text`` unquoted when printable, escaped otherwise; clipped to ``limit``."""
    s = text if text.isprintable() else repr(text)[1:-1]
    return s if len(s) <= limit else f"{s[:limit]}... ({len(s)} characters)"


def _shown(path: str) -> str:
    """The path as printed: escaped when it holds a newline or another control character."""
    return path if path.isprintable() else repr(path)[1:-1]


def read_capped(path: str, error: type[ValueError], max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of the regular file at ``path``; ``error`` (one line) otherwise.

    ``files.capped`` with ``follow=True``: ``O_NONBLOCK`` keeps the open of a FIFO from
    waiting for a writer, ``fstat`` of the open descriptor decides what was opened, and
    the read stops at ``max_bytes`` + 1.
    """
    where = _shown(path)
    try:
        data = _read_file(path, max_bytes, follow=True, missing_ok=False)
    except Refused as e:
        if e.code == "os_error":
            raise error(f"{where}: cannot read: {e.detail}") from None
        if e.code == "kind":
            raise error(f"{where}: cannot read: {e.detail}, not a regular file") from None
        raise error(f"{where}: larger than {max_bytes} bytes (the cap on a YAML input)") \
            from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(f"{where}:{line}: not UTF-8 (byte 0x{data[e.start]:02x} at offset "
                    f"{e.start})") from None


class NodeReader:
    """One file's nodes and typed fields; every failure is ``error`` with one line
    ``file:line: field: reason``."""

    def __init__(self, path: str, error: type[ValueError]):
        self.path = str(path)
        self.error = error

    # ---- the file --------------------------------------------------------------------
    def compose(self) -> yaml.Node | None:
        """The root node of the file (None when it holds no document), bounded as the
        module docstring says."""
        text = read_capped(self.path, self.error)
        try:
            self._scan(text)
            return yaml.compose(text, Loader=_Loader)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            line = mark.line + 1 if mark is not None else 1
            why = getattr(e, "problem", None) or str(e)
            raise self.error(f"{_shown(self.path)}:{line}: not valid YAML: "
                             f"{_plain(why, QUOTE_CHARS)}") from None

    def _scan(self, text: str) -> None:
        """Refuse aliases, depth past MAX_DEPTH and more than MAX_NODES nodes, from the
        event stream (libyaml's parser keeps its own stack: no recursion here)."""
        depth = nodes = 0
        for ev in yaml.parse(text, Loader=_Loader):
            if isinstance(ev, yaml.AliasEvent):
                name = _plain(ev.anchor)
                raise self._at(ev, "alias", f"aliases are not accepted (*{name})")
            if isinstance(ev, yaml.NodeEvent):
                nodes += 1
                if nodes > MAX_NODES:
                    raise self._at(ev, "size", f"more than {MAX_NODES} nodes")
            if isinstance(ev, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise self._at(ev, "nesting", f"deeper than {MAX_DEPTH} levels")
            elif isinstance(ev, yaml.CollectionEndEvent):
                depth -= 1

    def _at(self, ev: yaml.Event, field: str, problem: str) -> ValueError:
        line = ev.start_mark.line + 1 if ev.start_mark is not None else 1
        return self.error(f"{_shown(self.path)}:{line}: {field}: {problem}")

    # ---- nodes -----------------------------------------------------------------------
    def fail(self, node: yaml.Node | None, field: str, problem: str) -> ValueError:
        line = node.start_mark.line + 1 if node is not None else 1
        return self.error(f"{_shown(self.path)}:{line}: {field}: {problem}")

    @staticmethod
    def key(name: str) -> str:
        """A key as it appears in a field name: plain, or quoted and clipped."""
        return name if _PLAIN_KEY.fullmatch(name) else clip(name, 60)

    @staticmethod
    def describe(node: yaml.Node) -> str:
        """What a node is, for "got ...": its kind and, for a scalar, its clipped text."""
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        kind = _KINDS.get(node.tag, f"a {_plain(node.tag, 40)} value")
        if node.tag == f"{_T}null":
            return "null"
        if node.tag == f"{_T}str":
            return f"{kind} {clip(node.value, 60)}"
        return f"{kind} {_plain(node.value)}"

    def mapping(self, node: yaml.Node, field: str,
                allowed: tuple[str, ...] | None = None, what: str = "key"
                ) -> dict[str, yaml.Node]:
        """Keys -> value nodes; duplicate keys and (with ``allowed``) unknown keys refused,
        as "unknown <what>"."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, field, f"expected a mapping, got {self.describe(node)}")
        out: dict[str, yaml.Node] = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                raise self.fail(k, field, "keys must be plain names")
            name = f"{field}.{self.key(k.value)}" if field != "<top>" else self.key(k.value)
            if k.value in out:
                raise self.fail(k, name, "duplicate key")
            if allowed is not None and k.value not in allowed:
                raise self.fail(k, name, f"unknown {what}; valid: {', '.join(allowed)}")
            out[k.value] = v
        return out

    def require(self, m: dict[str, yaml.Node], parent: yaml.Node, field: str,
                key: str) -> yaml.Node:
        if key not in m:
            raise self.fail(parent, field, f"missing key {key!r}")
        return m[key]

    def seq(self, node: yaml.Node, field: str, max_len: int | None = None) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, field, f"expected a list, got {self.describe(node)}")
        if max_len is not None and len(node.value) > max_len:
            raise self.fail(node, field, f"at most {max_len} items, got {len(node.value)}")
        return list(node.value)

    def int_(self, node: yaml.Node, field: str, lo: int, hi: int) -> int:
        """An ASCII decimal integer in [lo, hi]."""
        want = f"an integer in [{lo}, {hi}]"
        if not isinstance(node, yaml.ScalarNode) or node.tag != f"{_T}int":
            raise self.fail(node, field, f"expected {want}, got {self.describe(node)}")
        if not _DECIMAL.fullmatch(node.value):
            raise self.fail(node, field, f"expected {want} in decimal digits, got "
                                         f"{_plain(node.value)}")
        digits = len(node.value.lstrip("+-"))
        if digits > 20:  # and int() of a 5000-digit text raises
            raise self.fail(node, field, f"must be in [{lo}, {hi}], got a {digits}-digit number")
        value = int(node.value)
        if not lo <= value <= hi:
            raise self.fail(node, field, f"must be in [{lo}, {hi}], got {value}")
        return value

    def float_(self, node: yaml.Node, field: str, lo: float, hi: float,
               lo_open: bool = False) -> float:
        """A finite decimal number in [lo, hi] ((lo, hi] with ``lo_open``); an integer is
        a number too."""
        rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        if not isinstance(node, yaml.ScalarNode) or node.tag not in (f"{_T}int", f"{_T}float"):
            raise self.fail(node, field, f"expected a number in {rng}, got {self.describe(node)}")
        if not _FLOAT.fullmatch(node.value):
            raise self.fail(node, field, f"expected a decimal number in {rng}, got "
                                         f"{_plain(node.value)}")
        value = float(node.value)
        if not math.isfinite(value) or value > hi or value < lo or (lo_open and value == lo):
            raise self.fail(node, field, f"must be in {rng}, got {node.value}")
        return value

    def str_(self, node: yaml.Node, field: str, max_len: int = QUOTE_CHARS) -> str:
        """A non-empty one-line string of at most ``max_len`` characters."""
        if not isinstance(node, yaml.ScalarNode) or node.tag != f"{_T}str":
            raise self.fail(node, field, f"expected a string, got {self.describe(node)}")
        s = node.value
        if not s.strip():
            raise self.fail(node, field, "expected a non-empty string")
        if len(s) > max_len:
            raise self.fail(node, field, f"at most {max_len} characters, got {len(s)}")
        if not s.isprintable():
            raise self.fail(node, field, f"one printable line expected, got {clip(s, 60)}")
        return s

    def names(self, node: yaml.Node, field: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
        """A list of distinct names out of ``allowed``."""
        out: list[str] = []
        for i, v in enumerate(self.seq(node, field, max_len=len(allowed))):
            if not isinstance(v, yaml.ScalarNode) or v.tag != f"{_T}str":
                raise self.fail(v, f"{field}[{i}]", f"expected a name, got {self.describe(v)}")
            if v.value not in allowed:
                raise self.fail(v, f"{field}[{i}]", f"unknown {clip(v.value, 60)}; valid: "
                                                    f"{', '.join(allowed)}")
            if v.value in out:
                raise self.fail(v, f"{field}[{i}]", f"repeated {v.value!r}")
            out.append(v.value)
        return tuple(out)
