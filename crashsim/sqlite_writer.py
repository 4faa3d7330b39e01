"""A writer process for the real-crash test: commit a workload, report each acknowledgement.

``python -m scopecheck.crashsim.sqlite_writer LAYOUT ROOT SEED COUNT`` opens Session ``s`` (already
created) under ROOT and commits ``make_workload(SEED, COUNT)`` in order, writing the index of each
acknowledged commit to stdout, one per line, flushed.  The parent kills it with SIGKILL at a
random moment and checks the reopened state (CRASH-SQL-7).
"""

from __future__ import annotations

import sys

from scopecheck.crashsim.workload import StepClock, make_workload


def main(argv: list[str]) -> int:
    layout, root, seed, count = argv[0], argv[1], int(argv[2]), int(argv[3])
    from scopecheck.crashsim.sqlite_sweep import SESSION_ID, open_repository

    clock = StepClock()
    repo = open_repository("shared" if layout == "shared" else "per-file", root, None, clock)
    storage = repo.open(SESSION_ID)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for index, writes in enumerate(make_workload(seed, count, big_every=5)):
        clock.at(index)
        storage.commit(writes)
        sys.stdout.write(f"{index}\n")
        sys.stdout.flush()
    storage.close()
    repo.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
