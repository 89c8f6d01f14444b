"""Retry specs: how many more attempts a failed job gets, and when."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .errors import InvalidRetrySpec

if TYPE_CHECKING:
    from ._common.types import RetrySpecLike

MAX_DELAY_MS = 100 * 366 * 24 * 3600 * 1000
"""The longest retry delay: about a century, so `now + delay` always fits a datetime."""

MAX_RETRIES = 2**31 - 2
"""The most retries: a job's last attempt, `retries + 1`, is then counted by the `attempts`
column (a 32-bit INTEGER on both databases)."""


@dataclasses.dataclass(frozen=True)
class RetrySpec:
    """Retry a failed job `retries` times; the delay before retry n is `delays[n-1]` ms.

    The last delay repeats; no delays means retry at once. Total attempts are
    `retries + 1`.
    """

    retries: int
    delays: Sequence[int] = ()

    def __post_init__(self) -> None:
        if isinstance(self.retries, bool) or not isinstance(self.retries, int):
            raise InvalidRetrySpec(f"retries must be an int, got {self.retries!r}")
        if not 0 <= self.retries <= MAX_RETRIES:
            raise InvalidRetrySpec(
                f"retries must be >= 0 and at most {MAX_RETRIES} (the attempts column counts "
                f"up to {MAX_RETRIES + 1}), got {self.retries}"
            )
        if isinstance(self.delays, (str, bytes)) or not isinstance(self.delays, Sequence):
            raise InvalidRetrySpec(f"delays must be a sequence of ints (ms), got {self.delays!r}")
        for delay in self.delays:
            if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
                raise InvalidRetrySpec(
                    f"every delay must be an int >= 0 (milliseconds), got {delay!r}"
                )
            if delay > MAX_DELAY_MS:
                raise InvalidRetrySpec(
                    f"every delay must be at most {MAX_DELAY_MS} ms (about 100 years), got {delay}"
                )
        object.__setattr__(self, "delays", tuple(self.delays))

    def delay_ms(self, retry: int) -> int:
        """Milliseconds to wait before retry number `retry` (1-based)."""
        if not self.delays:
            return 0
        return self.delays[min(retry, len(self.delays)) - 1]


def to_retry_spec(value: RetrySpecLike) -> RetrySpec | None:
    """Accept a `RetrySpec`, a dict with the same keys, or None (no retry)."""
    if value is None or isinstance(value, RetrySpec):
        return value
    if isinstance(value, Mapping):
        unknown = set(value) - {"retries", "delays"}
        if unknown:
            raise InvalidRetrySpec(
                f"unknown retry spec keys {sorted(unknown)}; expected 'retries' and 'delays'"
            )
        if "retries" not in value:
            raise InvalidRetrySpec("a retry spec dict needs a 'retries' key")
        return RetrySpec(value["retries"], value.get("delays", ()))
    raise InvalidRetrySpec(
        f"a retry strategy must return a RetrySpec, a dict or None, got {value!r}"
    )
