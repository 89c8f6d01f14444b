"""The job runner of one queue: the held-transaction mode's path (`_held`) and lease mode's
(`_leased`), over the steps they share (`_steps`). Worker threads, `process_next_job` and
`testing.run_due_jobs` run jobs through it. `docs/internals.md` walks through both paths.
"""

from __future__ import annotations

from .held import Batch, Checkout, HeldMode
from .leased import LeaseMode
from .slot import Replaced, Slot
from .steps import MAX_ABANDONMENTS, Stats, abandonments

__all__ = [
    "MAX_ABANDONMENTS",
    "Batch",
    "Checkout",
    "JobRunner",
    "Replaced",
    "Slot",
    "Stats",
    "abandonments",
]


class JobRunner(HeldMode, LeaseMode):
    """Runs the due jobs of one queue, in the mode its options say."""
