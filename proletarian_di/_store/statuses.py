"""The archive's statuses, as each side writes them: proletarian-di writes "success",
"failure" and "cancelled"; Proletarian (Clojure) writes `(str status)` of its keyword,
":success" and ":failure". Every reader of the archive takes both spellings for the same
outcome: `outcome` for a status read, `status_in` for a condition on the column."""

from __future__ import annotations

SUCCESS = "success"
FAILURE = "failure"
CANCELLED = "cancelled"

CLOJURE_STATUSES = {":success": SUCCESS, ":failure": FAILURE}
"""Proletarian's spelling of an outcome, to proletarian-di's."""

SPELLINGS = {
    SUCCESS: (SUCCESS, ":success"),
    FAILURE: (FAILURE, ":failure"),
    CANCELLED: (CANCELLED,),
}
"""Every spelling of each outcome in the archive's `status` column."""


def outcome(status: str) -> str:
    """The outcome a stored status means: "success", "failure" or "cancelled" for either
    side's spelling; any other text as it is."""
    return CLOJURE_STATUSES.get(status, status)


def status_in(column: str, *statuses: str) -> str:
    """A condition on `column` true for every spelling of these outcomes, each one of
    `SPELLINGS` (constant SQL, no parameter): `status IN ('success', ':success')`."""
    listed = ", ".join(f"'{spelling}'" for status in statuses for spelling in SPELLINGS[status])
    return f"{column} IN ({listed})"
