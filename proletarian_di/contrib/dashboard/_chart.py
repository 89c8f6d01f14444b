"""The throughput chart's geometry: one stacked bar (succeeded below, failed above) per bucket,
for a server-rendered SVG."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import timedelta, timezone
from typing import Any

from ...admin import QueueOverview, ThroughputBucket

WIDTH, HEIGHT, GAP = 720, 120, 2


@dataclasses.dataclass(frozen=True)
class Bar:
    """One bucket's bar in SVG units (y grows downwards), with its tooltip."""

    x: float
    width: float
    succeeded_y: float
    succeeded_height: float
    failed_y: float
    failed_height: float
    title: str


@dataclasses.dataclass(frozen=True)
class Chart:
    """The bars, the scale's top value, when the first bar begins, and the totals."""

    bars: list[Bar]
    peak: int
    start: str
    succeeded: int
    failed: int
    width: int = WIDTH
    height: int = HEIGHT


def summed(queues: Sequence[QueueOverview]) -> list[ThroughputBucket]:
    """The queues' last day added up, hour by hour (every queue's hours are the same)."""
    return [
        ThroughputBucket(hour[0].start, sum(b.succeeded for b in hour), sum(b.failed for b in hour))
        for hour in zip(*(queue.last_day for queue in queues), strict=True)
    ]


def chart(buckets: Sequence[ThroughputBucket]) -> Chart:
    """The chart of throughput buckets (oldest first), as `summed` or `admin.throughput`
    gives them."""
    step = buckets[1].start - buckets[0].start if len(buckets) > 1 else timedelta(hours=1)
    peak = max((b.succeeded + b.failed for b in buckets), default=0)
    scale = HEIGHT / peak if peak else 0.0
    slot = WIDTH / max(len(buckets), 1)
    bars = []
    for n, bucket in enumerate(buckets):
        ok, failed = bucket.succeeded * scale, bucket.failed * scale
        bars.append(
            Bar(
                x=round(n * slot + GAP / 2, 2),
                width=round(max(slot - GAP, 1), 2),
                succeeded_y=round(HEIGHT - ok, 2),
                succeeded_height=round(ok, 2),
                failed_y=round(HEIGHT - ok - failed, 2),
                failed_height=round(failed, 2),
                title=f"{_hm(bucket.start)} to {_hm(bucket.start + step)} UTC: "
                f"{bucket.succeeded} succeeded, {bucket.failed} failed",
            )
        )
    return Chart(
        bars=bars,
        peak=peak,
        start=_hm(buckets[0].start) if buckets else "",
        succeeded=sum(b.succeeded for b in buckets),
        failed=sum(b.failed for b in buckets),
    )


def _hm(moment: Any) -> str:
    return f"{moment.astimezone(timezone.utc):%H:%M}"
