"""Lease mode: a job is claimed and committed at once, under a lease that its worker renews
while the handler runs, and its outcome is written in a second short transaction, only if
the lease is still the worker's.

The lease lives in the job row: `leased_by` names the claim (a token unique to it) and
`process_at` is when the lease runs out, by the database's clock, which every worker's claim
judges leases by. So an expired lease is a due job like any other, and any worker's ordinary
claim rescues it; no sweeper is needed. Starting a job counts its attempt, so a job whose
handler kills its process ends in the failure archive after its retries, instead of looping.
A claim of several jobs starts the first and reserves the rest (`~` before the token) until
each starts: a batch whose process dies leaves the jobs it never started to run again, no
attempt charged.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .._store.dialects import Dialect, LeasedRow
from .._store.dialects.base import reserved
from .attempts import unique_name

RENEWALS_PER_LEASE = 3
"""The heartbeat renews a lease this many times per lease period."""


def lease_token() -> str:
    """A token naming one claim: the host and process that made it, and 64 random bits."""
    return unique_name()


class Leases:
    """The leases one worker holds now, (job id as stored, token), for its heartbeat."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[Any, str] = {}

    def add(self, leases: list[tuple[Any, str]]) -> None:
        """Renew these (job id, lease) pairs from now on."""
        with self._lock:
            self._held.update(leases)

    def drop(self, job_id: Any, token: str) -> None:
        """Stop renewing the job's lease `token`; a newer lease of the same job (its retry,
        claimed by another thread while this one's abandoned handler still ran) is kept."""
        with self._lock:
            if self._held.get(job_id) == token:
                del self._held[job_id]

    def held(self) -> list[tuple[Any, str]]:
        with self._lock:
            return list(self._held.items())


class Heartbeat(threading.Thread):
    """A worker's thread that renews its leases every third of `lease_s`, on a connection
    taken for each renewal; errors are reported and the next beat tries again."""

    def __init__(
        self,
        connect: Callable[[], contextlib.AbstractContextManager[Any]],
        dialect: Callable[[Any], Dialect],
        leases: Leases,
        lease_ms: int,
        stopping: threading.Event,
        on_error: Callable[[BaseException], None],
        name: str,
    ) -> None:
        self.connect, self.dialect, self.leases = connect, dialect, leases
        self.lease_ms, self.stopping, self.on_error = lease_ms, stopping, on_error
        self.renewals = 0
        super().__init__(name=name, daemon=True)

    def run(self) -> None:
        every = self.lease_ms / 1000 / RENEWALS_PER_LEASE
        while not self.stopping.wait(every):
            self.beat()

    def beat(self) -> None:
        """Renew every lease held now."""
        held = self.leases.held()
        if not held:
            return
        try:
            with self.connect() as conn:
                self.dialect(conn).renew(conn, held, self.lease_ms)
                self.renewals += 1
        except Exception as exc:
            self.on_error(exc)


@contextlib.contextmanager
def holding(leases: Leases | None, rows: list[LeasedRow], token: str) -> Iterator[None]:
    """Keep the leases of these claimed rows renewed for the block (and for as long as
    `drop` leaves them)."""
    if leases is None:
        yield
        return
    leases.add([(row[0], token if row[10] else reserved(token)) for row in rows])
    try:
        yield
    finally:
        for row in rows:
            leases.drop(row[0], token)
            leases.drop(row[0], reserved(token))
