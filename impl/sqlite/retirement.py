"""Retirement: how a committed ``RetireScope`` ends a scope's lifetime in the database.

This is a policy point of the contract, not an implementation detail: retirement is the only
lifetime authority (000 §2) -- no timeout, close or fork ends an ephemeral scope, only a committed
retirement does -- so what it removes, and in which transaction, decides every scope's
lifetime.  Each SQLite repository takes it as an explicit collaborator (``retirement=``) and
hands it to every Session it opens; the contract's policy is :data:`SCOPED_DELETES`.
"""

from __future__ import annotations

from typing import Protocol

import apsw


class Retirement(Protocol):
    def retire(self, conn: apsw.Connection, session_id: str, scope_id: str) -> None:
        """End the lifetime of ephemeral scope ``scope_id`` of Session ``session_id``.

        Runs on ``conn`` inside the commit's ``BEGIN IMMEDIATE`` transaction, in seq order with
        its sibling writes; raising rolls back the whole commit (SQLITE-4).
        """
        ...


class ScopedDeletes:
    """The two scoped deletes of 000 §8, inside the commit transaction, so the scope's rows
    vanish exactly when its sibling writes appear (SQLITE-3).  Both statements search the
    primary key prefix ``(session_id, scope_id)``; other Sessions and scopes are untouched."""

    def retire(self, conn: apsw.Connection, session_id: str, scope_id: str) -> None:
        params = (session_id, scope_id)
        conn.execute("DELETE FROM scalar_values WHERE session_id = ? AND scope_id = ?", params)
        conn.execute("DELETE FROM list_values WHERE session_id = ? AND scope_id = ?", params)

    def __repr__(self) -> str:
        return "SCOPED_DELETES"


#: The contract's retirement (SQLITE-3); every SQLite repository's default ``retirement``.
SCOPED_DELETES: Retirement = ScopedDeletes()
