"""The high-water mark of a JSONL Session: stage 4 of the open sequence (000 §6.3, JSONL-7).

Kept apart from :mod:`scopecheck.impl.jsonl.load` as a pure function so CrossHair can check its
contract (CHECK-4): the mark is never below the header's ``nextSeq - 1`` or any file's last complete
seq (retired sidecar records included: their seqs were used and must never be reissued), and it is
one of those claims (or 0 when there are none), never a value nothing on disk supports.
"""

from __future__ import annotations

from collections.abc import Sequence


def _claims(header_next_seq: int | None, file_tops: Sequence[int]) -> list[int]:
    """Every seq the files say was used: the header's ``nextSeq - 1`` and each file's top.

    A list, not a set: CrossHair keeps list membership symbolic but must hash set members."""
    claims = list(file_tops)
    if header_next_seq is not None:
        claims.append(header_next_seq - 1)
    return claims


def high_water(header_next_seq: int | None, file_tops: Sequence[int]) -> int:
    """The highest seq the Session has ever used.

    ``header_next_seq`` is the main header's ``nextSeq`` (``None`` when absent) and
    ``file_tops`` the last seq of each file's last complete transaction, read before any record
    is ignored — retired sidecar records count (JSONL-7).

    pre: header_next_seq is None or header_next_seq >= 1
    pre: len(file_tops) <= 4 and all(top >= 0 for top in file_tops)
    post: all(claim <= __return__ for claim in _claims(header_next_seq, file_tops))
    post: __return__ in [0, *_claims(header_next_seq, file_tops)]
    """
    high = 0 if header_next_seq is None else header_next_seq - 1
    for top in file_tops:
        high = max(high, top)
    return high
