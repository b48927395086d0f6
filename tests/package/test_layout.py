"""README's Layout section is the tree: it names every module, and its folder order is the
import order (a folder imports only the folders above it in the list, functions included).

The module-cycle test sees circles between modules; two folders that import each other
through different modules (``runtime/launch`` -> ``pipeline/emulate`` while
``pipeline/verify`` -> ``runtime``) form none and are still one layer split in two.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_import_cycles import PACKAGE, import_edges, modules

README = Path(__file__).resolve().parents[2] / "README.md"
_FOLDER = re.compile(r"^  ([a-z_]+)/ +(.*)$")


def layout(readme: str) -> dict[str, str]:
    """Folder -> its text in the Layout block, in the block's order."""
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```\n", 2)[1]
    out: dict[str, str] = {}
    folder = None
    for line in block.splitlines()[1:]:  # the first line is src/wgradcache/
        m = _FOLDER.match(line)
        if m:
            folder = m.group(1)
            out[folder] = m.group(2)
        elif folder is not None:
            out[folder] += " " + line.strip()
    return out


def _folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and
                                           (PACKAGE / parts[1]).is_dir()) else None


def upward_imports(order: list[str], edges: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import of a folder later in ``order`` (or not in it)."""
    rank = {f: i for i, f in enumerate(order)}
    bad = []
    for a, targets in sorted(edges.items()):
        fa = _folder(a)
        if fa is None:  # the package's own __init__/__main__: the entry point, above all
            continue
        for b in sorted(targets):
            fb = _folder(b)
            if fb is not None and rank.get(fb, len(order)) > rank.get(fa, -1):
                bad.append(f"{a} -> {b}")
    return bad


def test_every_import_points_up_the_layout():
    order = list(layout(README.read_text()))
    assert upward_imports(order, import_edges(PACKAGE)) == []


def test_the_layout_lists_every_folder_and_names_every_module():
    folders = layout(README.read_text())
    on_disk = sorted(p.name for p in PACKAGE.iterdir()
                     if p.is_dir() and (p / "__init__.py").exists())
    assert sorted(folders) == on_disk
    unnamed = []
    for mod in modules(PACKAGE):
        parts = mod.split(".")
        if len(parts) != 3:
            continue
        folder, name = parts[1], parts[2]
        if not re.search(rf"\b{re.escape(name)}\b", folders[folder]):
            unnamed.append(f"{folder}/{name}.py")
    assert unnamed == []


def test_an_upward_import_and_an_unknown_folder_are_found():
    edges = {"wgradcache.model.spec": {"wgradcache.cli.app"},
             "wgradcache.cli.app": {"wgradcache.model.spec"},
             "wgradcache.cache.store": {"wgradcache.extra.x"}}
    assert upward_imports(["model", "cache", "cli"], edges) == [
        "wgradcache.cache.store -> wgradcache.extra.x",
        "wgradcache.model.spec -> wgradcache.cli.app"]


def test_the_parser_reads_folders_and_their_continuation_lines():
    text = ("# x\n\n## Layout\n\nwords\n\n```\nsrc/wgradcache/\n  files/      a.py, b.py\n"
            "              c.py\n  model/      d.py\n```\n\n## Next\n```\n  cli/  x\n```\n")
    assert layout(text) == {"files": "a.py, b.py c.py", "model": "d.py"}
