"""A Flower ``Grid`` that collects replies promptly: the ServerApp's wait per message exchange.

Flower 1.41's ``HttpGrid.send_and_receive`` pushes the messages, pulls once, and then sleeps a fixed 3 s
between pulls. Every exchange of ``ampfl deploy`` (the discovery query, each round's train messages, and
each of SecAgg+'s four stages, which Flower's ``SecAggPlusWorkflow`` runs through the same call) therefore
ends on a 3 s boundary after its last reply arrived: on average 1.5 s of idle waiting per exchange, about
6 s per SecAgg+ round. :class:`PromptGrid` wraps the ServerApp's grid and pulls every
:data:`POLL_SECONDS` instead; everything else (message creation, node ids, the run) is the wrapped grid's.

What changes: only when the server notices a reply. The messages, their order of arrival as the transport
reads them (replies are matched by id, not by arrival) and the timeout are the same, so a deployment's
numbers do not change. A pull is one small request to the SuperLink (the reply bodies are fetched once, when
present), so the extra requests cost the SuperLink little.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from flwr.serverapp import Grid

if TYPE_CHECKING:
    from flwr.app import Message, RecordDict
    from flwr.supercore.run import Run

__all__ = ["POLL_SECONDS", "PromptGrid"]

#: Seconds between two pulls of the replies (Flower's own grid: 3).
POLL_SECONDS = 0.2


class PromptGrid(Grid):
    """``grid`` with replies pulled every :data:`POLL_SECONDS` by :meth:`send_and_receive` (module
    docstring); every other call goes to ``grid``."""

    def __init__(self, grid: Grid, poll_seconds: float = POLL_SECONDS) -> None:
        self.inner = grid
        self.poll_seconds = poll_seconds

    def set_run(self, run: Run) -> None:
        self.inner.set_run(run)

    @property
    def run(self) -> Run:
        return self.inner.run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return self.inner.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.inner.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.inner.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push ``messages`` and pull their replies every :attr:`poll_seconds` until every one has replied
        or ``timeout`` seconds have passed (None: no limit), as Flower's grid does with its 3 s sleep."""
        waiting = set(self.push_messages(messages))
        end = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while True:
            got = list(self.pull_messages(waiting))
            replies.extend(got)
            waiting.difference_update(m.metadata.reply_to_message_id for m in got)
            if not waiting or (end is not None and time.monotonic() >= end):
                return replies
            pause = self.poll_seconds if end is None else min(self.poll_seconds, end - time.monotonic())
            time.sleep(max(0.0, pause))
