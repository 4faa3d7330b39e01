"""``scopecheck inspect``: a read-only look at a JSONL Session on disk (JSONL-21).

It runs the same reader the backend's open uses (:func:`scopecheck.impl.jsonl.load.load_session`)
over a filesystem wrapper that refuses every mutating call, so it shows exactly what open would see
— header, each file's transactions and seqs, retirement boundaries per scope, which sidecar
records are live and which retired, the high-water mark, torn tails and corruption with file
and line, the lines in a non-canonical form open reads as upstream's reader does (JSONL-23),
and the repairs open would make — and it can never change a byte.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import orjson

from scopecheck.impl.fs import AppendFile, FileSystem, ForwardingFileSystem, OsFileSystem
from scopecheck.impl.jsonl import session_paths
from scopecheck.impl.jsonl.legacy import is_legacy_header
from scopecheck.impl.jsonl.load import FileScan, SessionLoad, load_session
from scopecheck.impl.jsonl.replay import replay
from scopecheck.impl.jsonl.root_layouts import header_session_id
from scopecheck.models.errors import ScopecheckError, StorageIOError, usage
from scopecheck.tools.inspect_legacy import inspect_legacy, render_legacy


class ReadOnlyFileSystem(ForwardingFileSystem):
    """Forwards reads; every mutating operation raises (the inspector's guarantee)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise StorageIOError("io_error", "the inspector is read-only", fs_code="not_supported")

    write_file = open_append = append = fsync = truncate = _refuse
    fsync_file = fsync_dir = rename = unlink = create_dir = remove = _refuse

    def close(self, handle: AppendFile) -> None:  # pragma: no cover - nothing is opened
        self._refuse()


def _main_logs(fs: FileSystem, directory: str) -> list[str]:
    """The ``*.jsonl`` files directly in ``directory`` (flat or upstream names alike)."""
    return sorted(
        os.path.join(directory, e.name)
        for e in fs.list_dir(directory)
        if e.is_file and e.name.endswith(session_paths.MAIN_SUFFIX)
    )


def _session_id_of(fs: FileSystem, path: str) -> str:
    """The id open would use for the file at ``path`` (JSONL-26).

    A file named ``<encoded id>.jsonl`` or, in upstream's layout,
    ``<createdAt>_<encoded id>.jsonl`` for the id its header names is that Session.  Any other
    flat name is the id the name spells (open then reports a header naming another id), and a
    file whose header names no id is inspected under the id its name spells, so a torn or
    missing header is reported rather than refused."""
    name = os.path.basename(path)
    named = session_paths.decode_main_name(name)
    try:
        header_id = header_session_id(fs, path)
    except ScopecheckError:
        header_id = None
    if header_id is not None:
        try:
            encoded = session_paths.encode_session_id(header_id)
        except ScopecheckError:
            encoded = None
        if encoded is not None and (
            name == encoded + session_paths.MAIN_SUFFIX
            or name.endswith(f"_{encoded}{session_paths.MAIN_SUFFIX}")
        ):
            return header_id
    if named is not None:
        return named
    if header_id is not None:
        return header_id
    raise usage(
        "not_found",
        f"{path} is neither a main log name (<encoded id>.jsonl) nor a file whose header "
        "names its session",
    )


def resolve(path: str, fs: FileSystem) -> tuple[str, str]:
    """``(main path, session id)`` for a main file (any name: JSONL-26), its ``.scopes``
    directory, a directory holding exactly one main log, or an upstream repository root whose
    one ``--<cwd>--`` folder holds exactly one."""
    path = os.path.abspath(path).rstrip("/") or "/"
    if path.endswith(session_paths.SCOPES_SUFFIX) and fs.is_dir(path):
        path = path[: -len(session_paths.SCOPES_SUFFIX)]
    if fs.is_dir(path):
        mains = _main_logs(fs, path)
        if not mains:
            folders = [
                os.path.join(path, e.name)
                for e in fs.list_dir(path)
                if not e.is_file and len(e.name) > 4 and e.name[:2] == e.name[-2:] == "--"
            ]
            mains = [m for folder in folders for m in _main_logs(fs, folder)]
        if len(mains) != 1:
            shown = ", ".join(os.path.relpath(m, path) for m in mains[:5])
            raise usage(
                "not_found",
                f"{path} holds {len(mains)} session files{f' ({shown})' if shown else ''}; "
                "pass one main .jsonl file",
            )
        path = mains[0]
    if not fs.exists(path) or fs.is_dir(path):
        raise usage("not_found", f"no such session file {path}")
    return path, _session_id_of(fs, path)


def _file_report(scan: FileScan, load: SessionLoad) -> dict[str, Any]:
    boundary = load.boundaries.get(scan.scope_id, 0) if scan.scope_id is not None else 0
    txs = []
    for tx in scan.txs:
        entry: dict[str, Any] = {
            "line": tx.line,
            "seqs": [tx.first, tx.last] if len(tx.seqs) > 1 else [tx.first],
            "writes": [
                f"{r['kind']}.{r['op']}" if "op" in r else str(r["kind"]) for r in tx.records
            ],
        }
        if scan.scope_id is not None:
            entry["status"] = "live" if tx.last > boundary else "retired"
        txs.append(entry)
    report: dict[str, Any] = {
        "path": scan.path,
        "kind": "main" if scan.scope_id is None else "sidecar",
        "header": scan.header,
        "complete_lines": len(scan.lines),
        "transactions": txs,
        "torn": None
        if scan.torn is None
        else {"line": scan.torn.line, "message": scan.torn.message},
        "corrupt": [
            {"line": p.line, "message": p.message}
            for p in [
                *scan.corrupt,
                *(  # found across files (stage 7: a seq in two files, JSONL-27), shown here too
                    e
                    for e in load.errors
                    if e.path == scan.path and e.line > 0 and e not in scan.corrupt
                ),
            ]
        ],
        "notes": [{"line": p.line, "message": p.message} for p in scan.notes],
    }
    if scan.scope_id is not None:
        report["scope_id"] = scan.scope_id
        report["retired_at"] = load.boundaries.get(scan.scope_id)
        report["live"] = scan.scope_id in load.live
    return report


def inspect_session(path: str, fs: FileSystem | None = None) -> dict[str, Any]:
    """Everything open would see and do for the Session at ``path``; modifies nothing."""
    reader = ReadOnlyFileSystem(fs if fs is not None else OsFileSystem())
    main, session_id = resolve(path, reader)
    load = load_session(reader, main, session_id)
    if load.main.header is None and load.main.lines and is_legacy_header(load.main.lines[0]):
        return inspect_legacy(main, session_id, reader)  # LEGACY-12
    retirements: dict[str, list[int]] = {}
    for tx in load.main.txs:
        for rec in tx.records:
            if rec["kind"] == "scope":
                retirements.setdefault(rec["scopeId"], []).append(rec["seq"])
    repairs: list[str] = []
    state_summary: dict[str, Any] | None = None
    if not load.errors:
        state = replay(load)  # in memory only: what open would hold
        live_scopes = sorted({k[0] for k in [*state.values, *state.lists] if k[0] is not None})
        state_summary = {
            "entries": len(state.entries),
            "usage_rows": len(state.usage),
            "values": len(state.values),
            "lists": len(state.lists),
            "list_elements": sum(len(v) for v in state.lists.values()),
            "message_count": state.stats.message_count,
            "scopes_with_state": live_scopes,
        }
        if load.main.torn is not None:
            repairs.append(
                f"republish {main} without its torn line {load.main.torn.line} "
                f"(header nextSeq {load.next_seq})"
            )
        for scope_id, scan in load.sidecars.items():
            if scope_id not in load.live:
                repairs.append(f"remove {scan.path} (nothing live after retirement)")
            elif scan.torn is not None:
                repairs.append(f"republish {scan.path} without its torn line {scan.torn.line}")
        repairs.extend(f"remove temp file {temp}" for temp in load.temps)
    return {
        "session_id": session_id,
        "main": main,
        "header": load.main.header,
        "files": [_file_report(load.main, load)]
        + [_file_report(scan, load) for scan in load.sidecars.values()],
        "retirements": retirements,
        "boundaries": dict(load.boundaries),
        "live_scopes": sorted(load.live),
        "high_water": load.high_water,
        "next_seq": load.next_seq,
        "retained_transactions": len(load.retained),
        "state": state_summary,
        "temp_files": list(load.temps),
        "unrelated_files": list(load.unrelated),
        "problems": [
            {"kind": p.kind, "file": p.path, "line": p.line, "message": p.message}
            for p in [
                *([load.main.torn] if load.main.torn else []),
                *(s.torn for s in load.sidecars.values() if s.torn),
                *load.errors,
            ]
        ],
        "notes": [
            {"file": p.path, "line": p.line, "message": p.message}
            for scan in (load.main, *load.sidecars.values())
            for p in scan.notes
        ],
        "open": "fails: " + str(load.errors[0].error()) if load.errors else "succeeds",
        "repairs_on_open": repairs,
    }


def render(report: dict[str, Any]) -> str:
    """A human-readable page for one :func:`inspect_session` report."""
    if "legacy" in report:
        return render_legacy(report)
    out = [f"session {report['session_id']!r}  ({report['main']})"]
    header = report["header"]
    out.append("header: " + (orjson.dumps(header).decode() if header else "MISSING/INVALID"))
    out.append(
        f"high-water mark: {report['high_water']}   next seq on open: "
        f"{report['next_seq']}   retained transactions: "
        f"{report['retained_transactions']}"
    )
    if report["state"]:
        st = report["state"]
        out.append(
            f"state on open: {st['entries']} entries ({st['message_count']} messages), "
            f"{st['usage_rows']} usage rows, {st['values']} values, {st['lists']} lists "
            f"({st['list_elements']} elements); scopes with state: "
            f"{', '.join(repr(s) for s in st['scopes_with_state']) or 'none'}"
        )
    if report["retirements"]:
        out.append("retirements (latest is the boundary):")
        for scope_id, seqs in sorted(report["retirements"].items()):
            out.append(f"  {scope_id!r}: seqs {seqs} -> boundary {seqs[-1]}")
    for file in report["files"]:
        if file["kind"] == "main":
            out.append(f"main log: {file['complete_lines']} complete lines")
        else:
            state = "live" if file["live"] else "nothing live (removed on open)"
            out.append(f"sidecar {file['scope_id']!r}: {file['path']}  [{state}]")
        for tx in file["transactions"]:
            seqs = "-".join(str(s) for s in tx["seqs"])
            status = f"  {tx['status']}" if "status" in tx else ""
            out.append(f"  line {tx['line']:>5}  seq {seqs:<11} {', '.join(tx['writes'])}{status}")
        if file["torn"]:
            out.append(f"  line {file['torn']['line']:>5}  TORN: {file['torn']['message']}")
        for bad in file["corrupt"]:
            out.append(f"  line {bad['line']:>5}  CORRUPT: {bad['message']}")
        for note in file["notes"]:
            out.append(f"  line {note['line']:>5}  NOTE (non-canonical, read as upstream reads "
                       f"it): {note['message']}")  # fmt: skip
    for temp in report["temp_files"]:
        out.append(f"temp file (cleanup artifact): {temp}")
    for other in report["unrelated_files"]:
        out.append(f"ignored (not a sidecar of this session): {other}")
    out.append(f"open {report['open']}")
    for repair in report["repairs_on_open"]:
        out.append(f"  open would: {repair}")
    return "\n".join(out)


def inspect_command(path: str, as_json: bool) -> int:
    """CLI entry: print the report; exit 0 if open would succeed, 1 if the Session is corrupt,
    2 if ``path`` does not name a Session."""
    try:
        report = inspect_session(path)
    except ScopecheckError as exc:
        print(f"scopecheck inspect: {exc}", file=sys.stderr)
        return 2
    if as_json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(render(report))
    return 1 if report["open"] != "succeeds" else 0
