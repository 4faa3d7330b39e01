"""``scopecheck inspect`` for legacy session files: what an import would produce (LEGACY-12).

The file is read through the inspector's read-only filesystem and imported in memory with the
backend's own importer (:func:`scopecheck.impl.jsonl.legacy.import_legacy`), so the report is
exactly what ``open`` would hold; ids are shown as placeholders because the real ones are minted at
open (LEGACY-3).  Nothing is written: the upgrade to format 4 happens only at a first commit.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson

from scopecheck.impl.fs import FileSystem
from scopecheck.impl.jsonl.legacy import import_legacy, upgrade_bytes
from scopecheck.impl.stats import add_usages
from scopecheck.models.errors import CorruptError
from scopecheck.models.records import UsageTotals


def placeholder_ids(timestamp_ms: int, ordinal: int) -> str:
    del timestamp_ms
    return f"<new-{ordinal}>"


def inspect_legacy(main: str, file_session_id: str, fs: FileSystem) -> dict[str, Any]:
    """The report of a legacy main file (see :func:`render_legacy`)."""
    lines = fs.read_lines(main)
    head = orjson.loads(lines.complete[0])
    header_id = head.get("id") if isinstance(head.get("id"), str) else file_session_id
    notes = []
    if header_id != file_session_id:
        notes.append(
            f"the header names session {header_id!r} but the file name says "
            f"{file_session_id!r}: open under the file name fails as corrupt (LEGACY-1); "
            "rename the file to <encoded header id>.jsonl to open it"
        )
    report: dict[str, Any] = {
        "session_id": header_id,
        "main": main,
        "legacy": {
            "version": head.get("version", 1),
            "complete_lines": len(lines.complete),
            "torn_tail_bytes": None if lines.tail is None else len(lines.tail),
        },
        "notes": notes,
    }
    try:
        imported = import_legacy(
            main, lines.complete, header_id, placeholder_ids, torn=lines.tail is not None
        )
    except CorruptError as exc:
        report["open"] = f"fails: {exc}"
        return report
    entries = imported.entries
    usage_row = imported.usage_row
    totals = add_usages(UsageTotals(), [usage_row["usage"]] if usage_row is not None else [])
    report["legacy"].update(
        {
            "records": imported.retained + imported.discarded,
            "retained": imported.retained,
            "discarded": imported.discarded,
        }
    )
    report.update(
        {
            "header": imported.header,
            "entries": len(entries),
            "entry_types": dict(Counter(e["type"] for e in entries)),
            "message_count": sum(1 for e in entries if e["type"] == "message"),
            "values": [
                {"namespace": v["namespace"], "key": v["key"], "seq": v["seq"], "value": v["value"]}
                for v in imported.values
            ],
            "usage_row": usage_row,
            "usage_totals": {
                "input": totals.input,
                "output": totals.output,
                "cacheRead": totals.cache_read,
                "cacheWrite": totals.cache_write,
                "totalTokens": totals.total_tokens,
                "costTotal": totals.cost_total,
            },
            "next_seq": imported.next_seq,
            "open": "succeeds",
            "upgrade_on_first_commit": {
                "lines": len(imported.records) + 1,
                "bytes": len(upgrade_bytes(imported)),
                "nextSeq": imported.next_seq,
            },
        }
    )
    return report


def render_legacy(report: dict[str, Any]) -> str:
    legacy = report["legacy"]
    out = [
        f"legacy session file (v{legacy['version']}) {report['session_id']!r}  ({report['main']})",
        f"complete lines: {legacy['complete_lines']}"
        + (
            f"; unterminated final line of {legacy['torn_tail_bytes']} bytes is ignored"
            if legacy["torn_tail_bytes"] is not None
            else ""
        ),
    ]
    out.extend(f"note: {note}" for note in report["notes"])
    if report["open"] != "succeeds":
        out.append(f"open {report['open']}")
        return "\n".join(out)
    out.append(
        f"import: {legacy['records']} records, {legacy['retained']} retained as entries, "
        f"{legacy['discarded']} folded away; next seq {report['next_seq']}"
    )
    types = ", ".join(f"{k} {v}" for k, v in sorted(report["entry_types"].items()))
    out.append(f"entries: {report['entries']} ({types}); messages {report['message_count']}")
    out.append("synthesised values (ids are minted at open; shown as <new-n>):")
    for v in report["values"]:
        text = orjson.dumps(v["value"]).decode()
        out.append(f"  seq {v['seq']:>5}  {v['namespace']}/{v['key']} = {text[:120]}")
    row = report["usage_row"]
    if row is None:
        out.append("usage: none in the file, no import usage row")
    else:
        t = report["usage_totals"]
        out.append(
            f"usage row seq {row['seq']} (adjustment, v3-import): input {t['input']}, output "
            f"{t['output']}, cacheRead {t['cacheRead']}, cacheWrite {t['cacheWrite']}, "
            f"totalTokens {t['totalTokens']}, cost {t['costTotal']:.6f}"
        )
    up = report["upgrade_on_first_commit"]
    out.append(
        f"open succeeds read-only; the first non-empty commit rewrites the file as format 4 "
        f"({up['lines']} lines, {up['bytes']} bytes, nextSeq {up['nextSeq']})"
    )
    return "\n".join(out)
