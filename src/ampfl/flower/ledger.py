"""The server's privacy ledger: every client's privacy events in SQLite (WAL), committed before release.

``ledger.sqlite`` in the run folder holds

- ``privacy_events(client TEXT, round INTEGER, event TEXT, protects_against TEXT)``: for each client the
  round's events cover (for an algorithm with privacy groups, paper 001, the events of the client's group
  only), one row per event (an ``(event, count)`` pair gives ``count`` rows), the event as
  :meth:`ampfl.accounting.events.PrivacyEvent.to_dict` JSON with sorted keys (under SecAgg+ noise shares,
  the event at the noise multiplier the server actually saw: :mod:`ampfl.flower.noise_shares`), and the
  parties the event's ε protects against (JSON list, e.g. ``["model consumers", "server"]``;
  docs/threat_model.md);
- ``privacy_spent(client TEXT, epsilon REAL, delta REAL)``: each client's ε at the run's δ, composed by a
  per-client :class:`~ampfl.fl.privacy.run_accountant.RunAccountant` (the same accountant, relation and δ as
  the run's), refreshed in the same transaction as the events.

:meth:`PrivacyLedger.record` commits a round's rows in one transaction (``synchronous=FULL``); the ServerApp
calls it before it releases the round's aggregate (the new global model), so whatever was released is in the
ledger even if the process is killed right after. With ``[privacy] max_epsilon``, :meth:`eligible` names
the clients whose next round stays within budget; the others are no longer asked.
"""

from __future__ import annotations

import copy
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ampfl.accounting.events import PrivacyEvent
    from ampfl.fl.algorithms.base import Algorithm
    from ampfl.fl.config import PrivacyConfig

LEDGER = "ledger.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS privacy_events (
    client TEXT NOT NULL, round INTEGER NOT NULL, event TEXT NOT NULL, protects_against TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS privacy_events_client ON privacy_events (client, round);
CREATE TABLE IF NOT EXISTS privacy_spent (client TEXT PRIMARY KEY, epsilon REAL, delta REAL);
"""

Events = Sequence[tuple["PrivacyEvent", int]]


class PrivacyLedger:
    """Per-client events and ε of one deployed run (module docstring).

    Args:
        path: the SQLite file (created with its tables when missing).
        privacy: the run's ``[privacy]`` settings.
        algorithm: the run's algorithm (privacy unit and neighbouring relation of its events).
        clients: the ids of every client of the population.
        protects_against: the parties the run's ε protects against (``threat_model``), stored in every row.
    """

    def __init__(
        self,
        path: str | Path,
        privacy: PrivacyConfig,
        algorithm: Algorithm,
        clients: Sequence[int],
        *,
        protects_against: Sequence[str] = (),
    ) -> None:
        from ampfl.fl.privacy.run_accountant import RunAccountant

        self.path = Path(path)
        self.privacy = privacy
        self.protects_against = json.dumps(list(protects_against))
        self.connection = sqlite3.connect(self.path, isolation_level=None)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute("PRAGMA synchronous=FULL")
        self.connection.executescript(_SCHEMA)
        fresh = RunAccountant(privacy, algorithm)  # built once (e.g. its PLD of the round), then copied
        self.accountants = {int(c): copy.deepcopy(fresh) for c in clients}
        self.algorithm = algorithm

    def client_events(self, client: int, events: Events) -> list[tuple[PrivacyEvent, int]]:
        """The events of a round that concern ``client``: all of them, or for an algorithm that sums by
        privacy group its group's (the round protocol's ``client_events``: each client's ε is its group's)."""
        from ampfl.fl.algorithms.round_protocol import grouped

        return grouped(self.algorithm.round_protocol()).client_events(int(client), events)

    def eligible(self, events: Events) -> list[int]:
        """The clients whose ε stays within ``max_epsilon`` after ``events`` (all without a budget)."""
        return [
            c for c, acc in self.accountants.items() if not acc.would_exceed(self.client_events(c, events))
        ]

    def record(self, round_index: int, clients: Sequence[int], events: Events) -> None:
        """Commit round ``round_index``'s events for ``clients`` (each client's own: :meth:`client_events`)
        and their new ε (one transaction)."""
        rows: list[tuple[str, int, str, str]] = []
        threats = self.protects_against
        spent = []
        for c in clients:
            own = self.client_events(int(c), events)
            for event, count in own:
                text = json.dumps(event.to_dict(), sort_keys=True)
                rows.extend((str(c), int(round_index), text, threats) for _ in range(int(count)))
            accountant = self.accountants[int(c)]
            accountant.compose(own)
            spent.append((str(c), accountant.epsilon(), accountant.delta))
        with self.connection:  # BEGIN ... COMMIT
            self.connection.execute("BEGIN")
            self.connection.executemany("INSERT INTO privacy_events VALUES (?, ?, ?, ?)", rows)
            self.connection.executemany("INSERT OR REPLACE INTO privacy_spent VALUES (?, ?, ?)", spent)

    def resume(self, rounds_done: int) -> None:
        """Continue after ``rounds_done`` released rounds: drop the rows of later rounds (committed, never
        released: the resumed run runs them again) and recompose each client's ε from the remaining rows."""
        from ampfl.accounting.events import event_from_dict

        with self.connection:
            self.connection.execute("BEGIN")
            self.connection.execute("DELETE FROM privacy_events WHERE round >= ?", (int(rounds_done),))
        query = "SELECT client, round, event FROM privacy_events ORDER BY round, rowid"
        by_round: dict[tuple[int, int], list[tuple[PrivacyEvent, int]]] = {}
        for client, round_index, text in self.connection.execute(query).fetchall():
            by_round.setdefault((int(round_index), int(client)), []).append(
                (event_from_dict(json.loads(text)), 1)
            )
        for (_, client), events in sorted(by_round.items()):
            self.accountants[client].compose(events)
        spent = [(str(c), acc.epsilon(), acc.delta) for c, acc in self.accountants.items()]
        with self.connection:
            self.connection.execute("BEGIN")
            self.connection.executemany("INSERT OR REPLACE INTO privacy_spent VALUES (?, ?, ?)", spent)

    def close(self) -> None:
        self.connection.close()
