"""The nightly job: build every planned target incrementally, gc, verify, report.

The plan (``jobs/nightly.yaml``) names targets, dtypes, variants, the verify level and
sample, the size bound, and timings measured on a device to import (``tune --json`` files:
the build machine has no GPU, so the device's measurements come to the cache this way).
The report is written twice, as ``report.json`` for machines
and ``report.md`` for people, and says what changed since the previous report in the same
directory. Exit status is policy: a failed job or a failed check is non-zero; rejects are
not (they are the ladder disagreeing with the rules, reported for a person to read).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from wgradcache.cache.entry import CorruptEntry, is_key, parse_object, record_json
from wgradcache.cache.gc import GcOptions, gc, parse_size
from wgradcache.cache.store import TargetCache, read_capped
from wgradcache.files.capped import Refused
from wgradcache.files.shown import printable
from wgradcache.files.written import Folder, open_out, refusal
from wgradcache.jobs.yamlsafe import NodeReader, clip
from wgradcache.model.spec import DTYPE_KEYS, VARIANT_KEYS
from wgradcache.model.targets import TARGETS
from wgradcache.pipeline.build import BuildRequest, BuildSummary, build
from wgradcache.pipeline.plan import DEFAULT_JOB_TIMEOUT, JOB_TIMEOUT_RANGE
from wgradcache.pipeline.verify import LEVELS, VerifyRequest, verify

__all__ = ["Plan", "PlanError", "ReportRefused", "RefreshRequest", "load_plan", "refresh",
           "render_markdown", "PreviousReport", "PreviousTarget", "read_previous",
           "MAX_REPORT"]


class PlanError(ValueError):
    pass


class ReportRefused(ValueError):
    """``report.json`` or ``report.md`` is a symlink or not a regular file, or cannot be
    written (the folder persists between nights: a link planted there would redirect the
    write). One line; checked before the build and again at the write."""


REPORTS = ("report.json", "report.md")


@dataclass(frozen=True)
class Plan:
    targets: tuple[str, ...]
    dtypes: tuple[str, ...]
    variants: tuple[str, ...]
    verify_level: str
    verify_sample: float
    max_size: int | None
    job_timeout: float
    # (target, file) pairs: timings to import into that target's cache after its build and
    # gc (the rows then refer to the entries as built tonight), before verify checks them
    timings: tuple[tuple[str, str], ...] = ()


_PLAN_KEYS = ("targets", "dtypes", "variants", "verify", "max_size", "job_timeout",
              "timings")
MAX_TIMING_FILES = 16
"""Timing files a plan may name per target."""


def load_plan(path: str | Path) -> Plan:
    """Read and check a plan; PlanError is one line ``file:line: field: reason``. The file
    is read as any YAML input is (jobs/yamlsafe.py: size cap, no aliases, depth limit)."""
    r = NodeReader(str(path), PlanError)
    root = r.compose()
    if root is None:
        raise r.fail(None, "<top>", "empty file")
    doc = r.mapping(root, "<top>", allowed=_PLAN_KEYS)
    targets = _names(r, doc, "targets", tuple(TARGETS))
    if not targets:
        raise r.fail(doc.get("targets", root), "targets", "name at least one target")
    level, sample = _verify_options(r, doc.get("verify"))
    timeout = doc.get("job_timeout")
    return Plan(targets=targets, dtypes=_names(r, doc, "dtypes", DTYPE_KEYS),
                variants=_names(r, doc, "variants", VARIANT_KEYS), verify_level=level,
                verify_sample=sample, max_size=_max_size(r, doc.get("max_size")),
                job_timeout=DEFAULT_JOB_TIMEOUT if _null(timeout) else
                r.float_(timeout, "job_timeout", *JOB_TIMEOUT_RANGE),
                timings=_timings(r, doc.get("timings"), targets, Path(path).parent))


def _timings(r: NodeReader, node: yaml.Node | None, targets: tuple[str, ...],
             base: Path) -> tuple[tuple[str, str], ...]:
    """``{target: [file, ...]}`` of planned targets; a relative file is the plan folder's
    (the plan and the files it names travel together). The files themselves are read at
    import, with every check ``tune --import`` makes."""
    if _null(node):
        return ()
    out: list[tuple[str, str]] = []
    for target, files in r.mapping(node, "timings", allowed=targets, what="target (not in "
                                   "targets)").items():
        field = f"timings.{target}"
        for i, f in enumerate(r.seq(files, field, max_len=MAX_TIMING_FILES)):
            out.append((target, str(base / r.str_(f, f"{field}[{i}]"))))
    return tuple(out)


def _null(node: yaml.Node | None) -> bool:
    return node is None or node.tag == "tag:yaml.org,2002:null"


def _names(r: NodeReader, doc: dict, key: str, valid: tuple[str, ...]) -> tuple[str, ...]:
    """Distinct names out of ``valid``; absent or null is none."""
    return () if _null(doc.get(key)) else r.names(doc[key], key, valid)


def _verify_options(r: NodeReader, node: yaml.Node | None) -> tuple[str, float]:
    """(level, sample): a level of LEVELS (default structure), a fraction in (0, 1]."""
    v = {} if _null(node) else r.mapping(node, "verify", allowed=("level", "sample"))
    level = "structure"
    if not _null(v.get("level")):
        level = r.str_(v["level"], "verify.level")
        if level not in LEVELS:
            raise r.fail(v["level"], "verify.level",
                         f"unknown {clip(level, 60)}; valid: {', '.join(LEVELS)}")
    sample = 1.0 if _null(v.get("sample")) else \
        r.float_(v["sample"], "verify.sample", 0.0, 1.0, lo_open=True)
    return level, sample


def _max_size(r: NodeReader, node: yaml.Node | None) -> int | None:
    """Bytes from a size such as 4G or 123456 (parse_size's forms, at most 1 EiB); absent
    or null is no bound."""
    if _null(node):
        return None
    if not isinstance(node, yaml.ScalarNode) or node.tag not in (
            "tag:yaml.org,2002:str", "tag:yaml.org,2002:int"):
        raise r.fail(node, "max_size", f"expected a size such as 4G, got {r.describe(node)}")
    try:
        size = parse_size(node.value)
    except ValueError as e:
        raise r.fail(node, "max_size", str(e)) from None
    if size < 1:
        raise r.fail(node, "max_size", "must be at least 1 byte (leave it out for no bound)")
    return size


def _cache_bytes(cache: TargetCache) -> int:
    return sum(cache.blob_path(k).stat().st_size for k in cache.blob_keys())


@dataclass(frozen=True)
class RefreshRequest:
    """``wgradcache refresh``'s options, from the CLI to the library in one object."""

    plan: Plan
    cache_dir: str
    report_dir: str | Path = "report"
    jobs: int = 0  # 0: all cores
    shard: tuple[int, int] | None = None
    geometries_file: str | None = None


def refresh(rreq: RefreshRequest, progress=None) -> dict:
    """Run the plan; write report.json and report.md into ``report_dir``; return the report."""
    from wgradcache.compile.preflight import require_tools
    from wgradcache.jobs import default_jobdata, walk
    from wgradcache.pipeline.build import codegen_context
    from wgradcache.wgrad.emit import generator_digest

    plan, cache_dir, geometries_file = rreq.plan, rreq.cache_dir, rreq.geometries_file
    require_tools(plan.targets)  # every target's tools before the first one builds
    report_dir = Path(rreq.report_dir)
    out = _report_folder(report_dir)  # a link planted there: refused before the build
    previous, unread = _previous(report_dir / "report.json")
    _, toolchain, tdigest = codegen_context()
    doc: dict = {"when": time.time(), "toolchain": toolchain, "toolchain_digest": tdigest,
                 "generator_digest": generator_digest(), "targets": {}}
    if unread:  # compared as a first run: its word on what changed is not taken
        doc["previous_unread"] = unread
    ok = True
    for target in plan.targets:
        t0 = time.monotonic()
        tdigest_t = codegen_context(target)[2]  # sm_90's is ptxas's, not the AMD one
        req = BuildRequest(target=target, dtypes=plan.dtypes, variants=plan.variants,
                           shard=rreq.shard, jobs=rreq.jobs, job_timeout=plan.job_timeout,
                           geometries_file=geometries_file, cache_dir=cache_dir)
        summary: BuildSummary = build(req, progress=progress)
        t_build = time.monotonic() - t0
        cache = TargetCache(cache_dir, target)
        data = default_jobdata(geometries_file)
        live = {s.identity_key() for s in walk(target, DTYPE_KEYS, None, data)}
        g = gc(cache, live, GcOptions(max_size=plan.max_size))
        t_gc = time.monotonic() - t0 - t_build
        imports = [_import(cache_dir, target, f) for t, f in plan.timings if t == target]
        vrep = verify(VerifyRequest(cache_dir=cache_dir, targets=(target,),
                                    level=plan.verify_level, sample=plan.verify_sample,
                                    device="emulator", geometries_file=geometries_file))
        t_verify = time.monotonic() - t0 - t_build - t_gc
        keys = cache.entry_keys()
        prev_t = previous.targets.get(target) if previous else None
        before = prev_t.entries if prev_t else frozenset()
        tdoc = {
            **summary.to_json(),
            "failures": [f.to_json() for f in summary.failures],
            # this run's: one per identity the plan refused
            "rejects": [record_json(r) for r in summary.rejects],
            "gc": g.to_json(),
            "timings": imports,
            "verify": vrep.to_json(),
            "cache_bytes": _cache_bytes(cache),
            "toolchain_digest": tdigest_t,
            "seconds": {"build": round(t_build, 3), "gc": round(t_gc, 3),
                        "verify": round(t_verify, 3)},
            "changed": {
                "added": len(set(keys) - before) if previous else len(keys),
                "removed": len(before - set(keys)) if previous else 0,
                "toolchain": previous is not None and (
                    prev_t.toolchain_digest if prev_t and prev_t.toolchain_digest
                    else previous.toolchain_digest) != tdigest_t,
                "generator": previous is not None
                and previous.generator_digest != doc["generator_digest"],
                "first_run": previous is None,
            },
            "entries": keys,
        }
        ok = ok and summary.ok and vrep.ok and not any("refused" in i for i in imports)
        doc["targets"][target] = tdoc
    doc["ok"] = ok
    for name, text in (("report.json", json.dumps(doc, indent=1, sort_keys=True)),
                       ("report.md", render_markdown(doc))):
        try:
            out.put(name, text.encode())
        except Refused as e:
            raise ReportRefused(f"--report-dir {report_dir}: {name}: cannot write: "
                                f"{refusal(e)}") from None
    return doc


def _import(cache_dir: str, target: str, path: str) -> dict:
    """One planned timings file into ``target``'s cache: what was imported, or the one
    line that refused it (nothing of that file imported; the night is not ok)."""
    from wgradcache.pipeline.fit import refit_line
    from wgradcache.pipeline.timing_import import ImportRefused, ImportRequest, import_timings

    try:
        rep = import_timings(ImportRequest(path=path, cache_dir=cache_dir, target=target),
                             refit=refit_line)
    except ImportRefused as e:
        return {"file": path, "refused": str(e)}
    return {"file": path, **rep.to_json()}


def _report_folder(report_dir: Path) -> Folder:
    """The report folder, held by descriptor, once both report files are proven
    writable there (no symlink, nothing but a regular file): ``ReportRefused``."""
    try:
        out = open_out(report_dir)
    except Refused as e:
        raise ReportRefused(f"--report-dir {report_dir}: cannot write: {refusal(e)}") \
            from None
    for name in REPORTS:
        try:
            out.writable(name)
        except Refused as e:
            raise ReportRefused(f"--report-dir {report_dir}: {name}: cannot write: "
                                f"{refusal(e)}") from None
    return out


MAX_REPORT = 64 << 20
"""The previous ``report.json``: a full six-target report is a few MB (its entry keys)."""


@dataclass(frozen=True)
class PreviousTarget:
    entries: frozenset[str]
    toolchain_digest: str | None  # absent from reports before per-target digests


@dataclass(frozen=True)
class PreviousReport:
    """What refresh reads of the report it wrote last time: the fields "changed" compares,
    with their types checked. That folder persists between nights and anyone with the CI's
    write access can put anything there, so the report is input like a cache file."""

    generator_digest: str | None
    toolchain_digest: str | None
    targets: dict[str, PreviousTarget]


def _digest(doc: dict, name: str, where: str) -> str | None:
    v = doc.get(name)
    if v is not None and type(v) is not str:
        raise CorruptEntry(f"{where}: corrupt: {name}: {type(v).__name__}, not a string")
    return v


def _previous_target(doc: object, where: str) -> PreviousTarget:
    if type(doc) is not dict:
        raise CorruptEntry(f"{where}: corrupt: {type(doc).__name__}, not an object")
    keys = doc.get("entries", [])
    if type(keys) is not list or not all(map(is_key, keys)):
        raise CorruptEntry(f"{where}: corrupt: entries: not a list of keys")
    return PreviousTarget(frozenset(keys), _digest(doc, "toolchain_digest", where))


def read_previous(path: Path) -> PreviousReport | None:
    """The previous report at ``path``, None when there is none; CorruptEntry (one line
    naming it) when it is not a regular file (a FIFO, a link: never followed, no open
    that blocks: the cache's capped read), is over ``MAX_REPORT``, is not whole JSON (the
    entry reader's parse: deep nesting, not UTF-8) or is not a report of the fields used
    here."""
    data = read_capped(path, MAX_REPORT)
    if data is None:
        return None
    doc = parse_object(data, str(path))
    targets = doc.get("targets", {})
    if type(targets) is not dict:
        raise CorruptEntry(f"{path}: corrupt: targets: {type(targets).__name__}, not an object")
    return PreviousReport(
        generator_digest=_digest(doc, "generator_digest", str(path)),
        toolchain_digest=_digest(doc, "toolchain_digest", str(path)),
        targets={t: _previous_target(v, f"{path}: targets.{t}")
                 for t, v in targets.items() if t in TARGETS})


def _previous(path: Path) -> tuple[PreviousReport | None, str]:
    """(the previous report or None, why it was not used: "" when it was or is absent)."""
    try:
        return read_previous(path), ""
    except CorruptEntry as e:
        return None, str(e)


def render_markdown(doc: dict) -> str:
    """report.md. Labels, reasons and keys come from the cache (input) and are escaped with
    the console's ``printable``: a newline in a label would forge a line (a CI
    ``::error::`` annotation) of the file and of what ``refresh`` prints."""
    tc = doc["toolchain"]
    lines = [f"# wgradcache nightly refresh: {'ok' if doc['ok'] else 'FAILED'}", "",
             f"Toolchain: LLVM {tc.get('llvm_version', '?')}, linker "
             f"{tc.get('linker_version', '?')}; generator {doc['generator_digest'][:12]}.", "",
             "| target | jobs | built | relinked | up to date | rejected | failed | verify "
             "| cache bytes | build s | gc s | verify s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for t, d in doc["targets"].items():
        v = d["verify"]
        s = d["seconds"]
        lines.append(f"| {t} | {d['jobs']} | {d['built']} | {d['relinked']} | "
                     f"{d['up_to_date']} | {d['rejected']} | {d['failed']} | "
                     f"{'ok' if v['ok'] else 'FAILED'} ({v['checked']} checked, "
                     f"{v['failed']} failed) | {d['cache_bytes']} | {s['build']} | {s['gc']} "
                     f"| {s['verify']} |")
    if doc.get("previous_unread"):
        lines += ["", f"Previous report not used: {printable(doc['previous_unread'])}"]
    for t, d in doc["targets"].items():
        c = d["changed"]
        lines += ["", f"## {t}", ""]
        if c["first_run"]:
            lines.append(f"First run: {c['added']} entries.")
        else:
            lines.append(f"Since the last run: {c['added']} entries added, {c['removed']} "
                         f"removed; toolchain {'changed' if c['toolchain'] else 'unchanged'}, "
                         f"generator {'changed' if c['generator'] else 'unchanged'}.")
        if d["built"] == 0 and d["relinked"] == 0:
            lines.append("Nothing was built: every job was up to date.")
        for f in d["failures"]:
            lines.append(f"- FAILED `{printable(f['label'])}`: {printable(f['reason'])}")
        for f in d["verify"]["failures"]:
            lines.append(f"- verify {f['level']} `{printable(f['label'] or f['key'])}`: "
                         f"{printable(f['reason'])}")
        for r in d["rejects"]:
            lines.append(f"- rejected `{printable(r.get('label'))}`: "
                         f"{printable(r.get('reason'))}")
        for i in d.get("timings", ()):
            if "refused" in i:
                lines.append(f"- timings REFUSED: {printable(i['refused'])}")
            else:
                lines.append(f"- timings `{printable(i['file'])}`: {i['imported']} rows read, "
                             f"{i['added']} added to {printable(i['device_class'])} "
                             f"({i['rows']} rows); fit: {printable(i['refit'] or 'none')}")
    return "\n".join(lines) + "\n"
