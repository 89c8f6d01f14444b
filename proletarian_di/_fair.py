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
from datetime import datetime
from typing import Any

from ._dialects import Dialect


class FairTurns:
    """One worker's place in the round of its queue's group keys."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.after = ""
        """The group key served last ('' : the round starts again)."""
        self._lock = threading.Lock()

    def claim(self, conn: Any, dialect: Dialect, now: datetime, lease: bool = False) -> list[Any]:
        """The next group's first due job, locked in the transaction open on `conn` (a
        held-mode `JobRow`, or with `lease` the row `Dialect._lease` takes); [] if none."""
        after = self.after
        row = dialect.fair_claim(conn, self.queue, after, now, lease)
        if row is None:
            row = dialect.fair_claim(conn, self.queue, None, now, lease)
            if row is None and after:
                row = dialect.fair_claim(conn, self.queue, "", now, lease)
        if row is None:
            return []
        *job, group = row
        with self._lock:
            self.after = group
        return [tuple(job)]
