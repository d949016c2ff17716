"""A SuperNode that asks the SuperLink for its next message promptly: the local federation's nodes.

Flower 1.41's SuperNode (``flwr.supernode.start_client_internal``) pulls the SuperLink for a message and,
when none is waiting, sleeps a fixed 3 s before it pulls again. Every message exchange of a deployment
(each round's train messages, each of SecAgg+'s stages) therefore reaches a node on average 1.5 s after the
ServerApp sent it, and the exchange waits for the slowest of its nodes: close to 3 s. Then the node's
SuperExec, polling for tasks every second by default, starts the ClientApp.

``python -m ampfl.flower.prompt_supernode ARGS`` runs Flower's own ``flower-supernode`` entry point with
``ARGS``, with that one idle sleep shortened to :data:`POLL_SECONDS` (:func:`patch`);
:class:`~ampfl.flower.local.LocalFederation` starts its SuperNodes this way, and sets Flower's own
``FLWR_SUPEREXEC_TASK_POLL_INTERVAL`` (:data:`SUPEREXEC_POLL_SECONDS`) for the SuperExecs. What changes is
only when a node notices a message: the messages, their contents and the order in which the transport
matches replies (by id) are Flower's, so a deployment's numbers do not change (the local federation's
tests compare them with ``ampfl run``). A pull is one small request, so polling loopback more often costs
the SuperLink little. On a Flower whose loop is not the one this was written against, :func:`patch` leaves
the SuperNode as Flower wrote it.

The ServerApp's side of the same wait is :class:`ampfl.flower.polling.PromptGrid`.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import time
from typing import Any

__all__ = ["POLL_SECONDS", "SUPEREXEC_POLL_SECONDS", "flower_supernode", "patch"]

#: Seconds between two pulls of an idle SuperNode (Flower's own: 3).
POLL_SECONDS = 0.2
#: Seconds between two task polls of a SuperExec (``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``; Flower's own: 1).
SUPEREXEC_POLL_SECONDS = 0.1
_LOOP = "flwr.supernode.start_client_internal"
_IDLE = "time.sleep(3)"  # the idle pause of the loop, as Flower 1.41 writes it


class _PromptTime:
    """The ``time`` module as the SuperNode's loop sees it: its 3 s idle pause lasts :data:`POLL_SECONDS`;
    every other sleep and every other name is the real module's."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(POLL_SECONDS if seconds == 3 else seconds)


def patch() -> bool:
    """Shorten the SuperNode loop's idle pause (module docstring); True when done, False (nothing changed)
    where the loop's module does not read ``time`` for exactly one 3 s pause."""
    module = importlib.import_module(_LOOP)
    if getattr(module, "time", None) is not time or inspect.getsource(module).count(_IDLE) != 1:
        return False
    module.time = _PromptTime()  # type: ignore[attr-defined]
    return True


def flower_supernode() -> None:
    """Flower's ``flower-supernode`` entry point on ``sys.argv``, polling promptly unless
    ``AMPFL_PROMPT_SUPERNODES=0`` (then Flower's as it is)."""
    if os.environ.get("AMPFL_PROMPT_SUPERNODES", "1") != "0":
        patch()
    from flwr.supernode.cli.flower_supernode import flower_supernode as flowers

    flowers()


def main(argv: list[str]) -> int:
    """``python -m ampfl.flower.prompt_supernode ARGS``: :func:`flower_supernode` on ``ARGS``."""
    sys.argv = ["flower-supernode", *argv]
    flower_supernode()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
