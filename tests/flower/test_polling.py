"""ampfl.flower.polling.PromptGrid: an exchange's replies, pulled every poll_seconds (not Flower's 3 s)."""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from ampfl.flower.polling import PromptGrid


class FakeGrid:
    """Replies to message i become available ``delays[i]`` seconds after the push."""

    def __init__(self, delays: list[float]) -> None:
        self.delays = delays
        self.pulls = 0
        self.pushed_at = 0.0
        self.created: list[tuple[Any, ...]] = []

    def push_messages(self, messages: Iterable[Any]) -> list[str]:
        self.pushed_at = time.monotonic()
        return [f"m{i}" for i, _ in enumerate(messages)]

    def pull_messages(self, message_ids: Iterable[str]) -> list[Any]:
        self.pulls += 1
        now = time.monotonic() - self.pushed_at
        ready = [m for m in message_ids if self.delays[int(m[1:])] <= now]
        return [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=m)) for m in ready]

    def create_message(self, *args: Any) -> tuple[Any, ...]:
        self.created.append(args)
        return args

    def get_node_ids(self) -> list[int]:
        return [7, 9]


def _replied(replies: Iterable[Any]) -> list[str]:
    return sorted(r.metadata.reply_to_message_id for r in replies)


def test_every_reply_is_collected_promptly() -> None:
    inner = FakeGrid([0.0, 0.15, 0.3])
    grid = PromptGrid(inner, poll_seconds=0.05)
    started = time.monotonic()
    replies = grid.send_and_receive(["a", "b", "c"], timeout=10.0)
    waited = time.monotonic() - started
    assert _replied(replies) == ["m0", "m1", "m2"]  # each reply once, none lost between pulls
    assert 0.3 <= waited < 2.5  # Flower's own grid would return at the 3 s poll (slack for a loaded machine)
    assert inner.pulls >= 3


def test_the_timeout_returns_what_arrived() -> None:
    grid = PromptGrid(FakeGrid([0.0, 60.0]), poll_seconds=0.05)
    started = time.monotonic()
    replies = grid.send_and_receive(["a", "b"], timeout=0.3)
    assert _replied(replies) == ["m0"]
    assert 0.3 <= time.monotonic() - started < 2.5  # well before a 3 s poll, with slack for load


def test_other_calls_go_to_the_wrapped_grid() -> None:
    inner = FakeGrid([])
    grid = PromptGrid(inner)
    assert list(grid.get_node_ids()) == [7, 9]
    grid.create_message("content", "train", 7, "0", 5.0)
    assert inner.created == [("content", "train", 7, "0", 5.0)]


def test_the_supernodes_idle_pull_is_shortened_and_nothing_else(monkeypatch: Any) -> None:
    """ampfl.flower.prompt_supernode: on flwr 1.41 the SuperNode loop's 3 s idle pause becomes
    POLL_SECONDS, its other sleeps and names stay the time module's; a loop without that pause is left
    as Flower wrote it."""
    import flwr.supernode.start_client_internal as loop

    from ampfl.flower import prompt_supernode

    monkeypatch.setattr(loop, "time", time)  # restored after the test
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    assert prompt_supernode.patch()
    loop.time.sleep(3)
    loop.time.sleep(0.5)
    assert slept == [prompt_supernode.POLL_SECONDS, 0.5]
    assert loop.time.monotonic is time.monotonic
    monkeypatch.setattr(loop, "time", time)
    monkeypatch.setattr(prompt_supernode, "_IDLE", "time.sleep(30)")
    assert not prompt_supernode.patch() and loop.time is time


def test_the_prompt_supernode_is_flowers_patched_unless_switched_off(monkeypatch: Any) -> None:
    """flower_supernode() (the fork server's and the cold start's SuperNode) runs Flower's own entry point,
    with the loop patched, or as Flower wrote it under AMPFL_PROMPT_SUPERNODES=0."""
    import flwr.supernode.start_client_internal as loop

    from ampfl.flower import prompt_supernode

    cli = importlib.import_module("flwr.supernode.cli.flower_supernode")  # the module, not its function
    seen: list[bool] = []
    monkeypatch.setattr(cli, "flower_supernode", lambda: seen.append(loop.time is not time))
    for switch, patched in (("0", False), ("1", True)):
        monkeypatch.setattr(loop, "time", time)  # restored after the test
        monkeypatch.setenv("AMPFL_PROMPT_SUPERNODES", switch)
        prompt_supernode.flower_supernode()
        assert seen[-1] is patched


def test_local_federations_poll_their_superexecs_promptly(tmp_path: Any, monkeypatch: Any) -> None:
    """Flower's own FLWR_SUPEREXEC_TASK_POLL_INTERVAL is set for the federation's processes (a user's own
    value is kept)."""
    from ampfl.flower.local import flower_env
    from ampfl.flower.prompt_supernode import SUPEREXEC_POLL_SECONDS

    monkeypatch.delenv("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", raising=False)
    env = flower_env(tmp_path, "127.0.0.1:9")
    assert float(env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"]) == SUPEREXEC_POLL_SECONDS
    monkeypatch.setenv("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.5")
    assert flower_env(tmp_path, "127.0.0.1:9")["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] == "0.5"
