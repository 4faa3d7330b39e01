"""Commits, reads and close from several threads on one SQLite Session (LIFE-1, SQLITE-5)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from scopecheck.models.addresses import value, value_list
from scopecheck.models.errors import ClosedError
from scopecheck.models.writes import append_list, set_value


@pytest.mark.rule("SQLITE-5", "LIFE-1")
def test_concurrent_commits_and_reads_get_distinct_contiguous_seqs(make_repo: Any) -> None:
    storage = make_repo().create("s")
    seqs: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        try:
            for i in range(25):
                committed = storage.commit(
                    [set_value(value("t", str(n)), i), append_list(value_list("l", "k"), n)]
                )
                storage.get_value(value("t", str(n)))
                storage.read_list(value_list("l", "k"), order="desc", limit=3)
                with lock:
                    seqs.extend(c.seq for c in committed)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(seqs) == list(range(1, 201))
    assert len(storage.read_list(value_list("l", "k"))) == 100


@pytest.mark.rule("LIFE-1", "LIFE-2")
def test_close_during_commits_drains_and_then_refuses(make_repo: Any) -> None:
    storage = make_repo().create("s")
    outcomes: list[str] = []
    started = threading.Event()

    def worker() -> None:
        for i in range(200):
            try:
                storage.commit([set_value(value("t", "k"), i)])
                started.set()
                outcomes.append("ok")
            except ClosedError:
                outcomes.append("closed")

    thread = threading.Thread(target=worker)
    thread.start()
    started.wait(5)
    storage.close()
    thread.join()
    assert outcomes[0] == "ok" and "closed" in outcomes
    first_closed = outcomes.index("closed")
    assert set(outcomes[first_closed:]) == {"closed"}
    with pytest.raises(ClosedError):
        storage.get_value(value("t", "k"))
