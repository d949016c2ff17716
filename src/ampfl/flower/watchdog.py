"""The watchdog of a local federation: its processes die with ``ampfl deploy``, whatever kills it.

``python -m ampfl.flower.watchdog PARENT_PID MARKER`` runs in a session of its own (so a signal to the
deploy's process group does not reach it) and checks every :data:`POLL_SECONDS` whether ``ampfl deploy``
(``PARENT_PID``) is alive. When it is not — ``kill -9``, an out-of-memory kill, a closed terminal — it sends
SIGKILL to every process of this user carrying the run's marker (:data:`ampfl.flower.local.MARKER`: the
SuperLink, the SuperNodes, ``flower-superexec`` and the app processes they spawned), a few times over
:data:`SWEEP_SECONDS` to catch processes spawned meanwhile, and exits. A normal end of the federation stops
the watchdog first (SIGTERM). Polling the parent (rather than a parent-death signal) also covers the
grandchildren that Flower starts in sessions of their own.
"""

from __future__ import annotations

import os
import signal
import sys
import time

#: Seconds between two checks of the parent.
POLL_SECONDS = 0.2
#: Seconds over which the marked processes are swept after the parent died.
SWEEP_SECONDS = 2.0


def _alive(pid: int) -> bool:
    """Whether ``pid`` (this process's parent when started by :class:`~ampfl.flower.local.LocalFederation`)
    lives: a child is re-parented when its parent dies, which also guards against a reused pid."""
    if os.getppid() != pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(marker: str) -> int:
    """SIGKILL every live process carrying ``marker`` (not this one); returns how many were signalled."""
    from ampfl.flower.local import marked_processes

    killed = 0
    for pid in marked_processes(marker):
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed


def watch(parent: int, marker: str) -> None:
    """Wait for ``parent`` to die, then sweep ``marker``'s processes (module docstring)."""
    while _alive(parent):
        time.sleep(POLL_SECONDS)
    end = time.monotonic() + SWEEP_SECONDS
    while time.monotonic() < end:
        sweep(marker)
        time.sleep(POLL_SECONDS)
    sweep(marker)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit() or not argv[1]:
        print("usage: python -m ampfl.flower.watchdog PARENT_PID MARKER", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on the terminal is the parent's to handle
    watch(int(argv[0]), argv[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
