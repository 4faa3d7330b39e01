"""Run a backend command and keep a copy of every line it reads and writes: the process
protocol's traffic exactly as on the wire (tests/process/test_protocol_contract.py).

    python recording_wrapper.py LOG_DIR -- COMMAND ...

Each run appends its requests to ``LOG_DIR/<start>.in`` and the backend's responses to
``LOG_DIR/<start>.out`` (``<start>`` orders the processes of one test by start time), passing
both on unchanged.  Closing stdin closes the backend's; the wrapper exits with its status.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time


def main() -> int:
    log_dir, dash, *command = sys.argv[1:]
    assert dash == "--" and command, __doc__
    stem = os.path.join(log_dir, f"{time.time_ns():020d}-{os.getpid()}")
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None

    def requests() -> None:
        assert child.stdin is not None
        with open(f"{stem}.in", "ab") as log:
            for line in sys.stdin.buffer:
                log.write(line)
                log.flush()
                try:
                    child.stdin.write(line)
                    child.stdin.flush()
                except BrokenPipeError:
                    break
        child.stdin.close()

    threading.Thread(target=requests, daemon=True).start()
    with open(f"{stem}.out", "ab") as log:
        for line in child.stdout:
            log.write(line)
            log.flush()
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
