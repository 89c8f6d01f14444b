"""Fair claims (`fair=True`): a worker's claims take turns across its queue's group keys
(`enqueue(..., group_key=...)`), so one tenant's backlog does not make another's jobs wait
behind it.

The worker remembers the group key it served last (`FairTurns.after`). Its next claim takes
the first due job of the next group key in the order of the fair index `(queue, group_key,
-priority, process_at)`: one index scan that starts past the last group. Past the last
group come the jobs without a key (as one more group, through the claim index), then the
first group again. Within a group, jobs go by priority, then due time, as in any claim. Each
worker keeps its own turn; several workers each take turns, so the groups still share.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any, NamedTuple

from .._store.dialects import Dialect
from .rates import RateGate


class FairTurns:
    """One worker's place in the round of its queue's group keys."""

    def __init__(self, queue: str, recheck_s: float = 0.1) -> None:
        self.queue = queue
        self.after = ""
        """The group key served last ('' : the round starts again)."""
        self.recheck_s = recheck_s
        self._none_ungrouped_until = 0.0
        """Where the jobs without a key are read through the claim index (PostgreSQL's fair
        index leaves them out), a turn that found none skips them until then
        (`time.monotonic()`): that read walks over the due jobs with a key."""
        self._lock = threading.Lock()

    def claim(
        self,
        conn: Any,
        dialect: Dialect,
        now: datetime,
        lease: bool = False,
        gate: RateGate | None = None,
        first: FirstTry | None = None,
    ) -> list[Any]:
        """The next group's first due job, locked in the transaction open on `conn` (a
        held-mode `JobRow`, or with `lease` the row `Dialect._lease` takes); [] if none.

        With a rate limit by group key (`gate`), a group without a free slot is passed over
        (its row stays locked until the transaction ends, unrun), and the turn's next scans
        read each group's slots beside its jobs, so they pass over the groups without one,
        however many: a claim whose group has a free slot reads no slot more than before.
        When none is left the gate learns when to wake the threads.

        `first`: the turn's first scan, made already (in the round trip of the last
        commit, or with the BEGIN: `Session.fair_claim`)."""
        limited = gate if gate is not None and gate.by_group else None
        slots = None
        after: str | None = self.after if first is None else first.after
        ungrouped_tried, restarted = False, after == ""
        for _ in range(MAX_TRIES):
            if first is not None:
                row, first = (first.rows[0] if first.rows else None), None
            else:
                row = dialect.fair_claim(conn, self.queue, after, now, lease, slots)
            if row is None or (limited is not None and not limited.take(conn, dialect, row[-1])):
                if row is not None and after is not None:
                    assert limited is not None
                    slots = limited.group_slots  # from here on, held groups are passed over
                    after = row[-1]
                    continue
                if after is None:  # the jobs without a key had their turn
                    if row is None and not dialect.fair_index_has_all:
                        self._none_ungrouped_until = time.monotonic() + self.recheck_s
                elif not ungrouped_tried:  # past the last group: the jobs without a key
                    ungrouped_tried = True
                    if self._ungrouped_due(dialect):
                        after = None
                        continue
                if restarted:
                    break
                after, restarted = "", True  # the round starts again
                continue
            *job, group = row
            with self._lock:
                self.after = group
            return [tuple(job)]
        if limited is not None:
            limited.all_held(conn, dialect)
        return []

    def _ungrouped_due(self, dialect: Dialect) -> bool:
        """Whether the jobs without a key have their turn now (see `_none_ungrouped_until`)."""
        return dialect.fair_index_has_all or time.monotonic() >= self._none_ungrouped_until


class FirstTry(NamedTuple):
    """A turn's first scan, made before `FairTurns.claim`: the group key it started past,
    and the rows it locked (none or one, its group key last)."""

    after: str
    rows: list[Any]


MAX_TRIES = 32
"""The most claims one fair turn makes: past the end of the keys and the jobs without one,
and past groups whose free slot another claim took between the scan and the take (or whose
bucket is a digest, which the scan cannot read)."""
