"""The throughput charts' geometry, for server-rendered SVG: the chart, one stacked bar
(succeeded below, failed above) per bucket (an hour or a minute), with a scale of round
numbers on the left and a tick at every bucket below, each bar a link to its jobs where
given; a queue's sparkline of its last hour, a bar a minute; and the timings' duration
charts (`lines`), a queue and job type's p50 and p95 over hours or minutes."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from ...admin import QueueOverview, ThroughputBucket

WIDTH, HEIGHT, GAP = 720, 120, 2
"""The plot's area, in SVG units, and the gap between bars."""
LEFT, TOP, BOTTOM, RIGHT = 44, 8, 22, 8
"""The margins around the plot: the scale's labels on the left, the hours' below."""
Y_TICKS = 4
"""At most this many steps of the scale above zero."""
X_LABELS = 8
"""At most this many hours labelled below (every hour gets a tick)."""


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
    href: str | None = None
    """Where the bar leads: the jobs that finished in its bucket."""


@dataclasses.dataclass(frozen=True)
class Tick:
    """A mark on an axis at `at` (SVG units along it), labelled unless `label` is empty."""

    at: float
    label: str


@dataclasses.dataclass(frozen=True)
class Chart:
    """The bars, the scale's top value, when the first bar begins, the totals, and the axes'
    ticks: the scale's (`y_ticks`, at round numbers) and the hours' (`x_ticks`)."""

    bars: list[Bar]
    peak: int
    start: str
    succeeded: int
    failed: int
    linked: bool = False
    """Whether its bars are links to their jobs."""
    unit: str = "hour"
    """What a bar covers: "hour" or "minute"."""
    span: str = "24 hours"
    """The time the chart covers, in words ("24 hours", "hour")."""
    y_ticks: list[Tick] = dataclasses.field(default_factory=list)
    x_ticks: list[Tick] = dataclasses.field(default_factory=list)
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP
    view_width: int = LEFT + WIDTH + RIGHT
    view_height: int = TOP + HEIGHT + BOTTOM


def summed(queues: Sequence[QueueOverview]) -> list[ThroughputBucket]:
    """The queues' last day added up, hour by hour (every queue's hours are the same)."""
    return [
        ThroughputBucket(hour[0].start, sum(b.succeeded for b in hour), sum(b.failed for b in hour))
        for hour in zip(*(queue.last_day for queue in queues), strict=True)
    ]


def nice_step(peak: int, steps: int = Y_TICKS) -> int:
    """The smallest round step (1, 2 or 5 times a power of ten) that reaches `peak` in at most
    `steps` steps."""
    if peak <= 0:
        return 1
    power = 10 ** max(0, math.floor(math.log10(peak / steps)))
    for factor in (1, 2, 5, 10):
        if factor * power * steps >= peak:
            return factor * power
    return 10 * power  # pragma: no cover - the loop always returns


Link = Callable[[datetime, datetime], str]
"""`link(start, end)`: the URL of the jobs that finished from `start` until `end`."""


def chart(
    buckets: Sequence[ThroughputBucket], span: str = "24 hours", link: Link | None = None
) -> Chart:
    """The chart of throughput buckets (oldest first), as `summed`, `admin.throughput` or
    `admin.last_hour` gives them, covering `span` (in words); each bar a link to its jobs
    with `link`."""
    step = buckets[1].start - buckets[0].start if len(buckets) > 1 else timedelta(hours=1)
    per = "minute" if step < timedelta(hours=1) else "hour"
    peak = max((b.succeeded + b.failed for b in buckets), default=0)
    unit = nice_step(peak)
    top = unit * max(1, math.ceil(peak / unit))
    scale = HEIGHT / top
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
                href=link(bucket.start, bucket.start + step) if link else None,
            )
        )
    y_ticks = [
        Tick(round(HEIGHT - value * scale, 2), _count(value))
        for value in range(0, top + 1, unit)
        if peak or value == 0
    ]
    every = max(1, math.ceil(len(buckets) / X_LABELS))
    x_ticks = [
        Tick(round(n * slot, 2), _hm(bucket.start) if n % every == 0 else "")
        for n, bucket in enumerate(buckets)
    ]
    return Chart(
        bars=bars,
        peak=peak,
        start=_hm(buckets[0].start) if buckets else "",
        succeeded=sum(b.succeeded for b in buckets),
        failed=sum(b.failed for b in buckets),
        linked=link is not None,
        unit=per,
        span=span,
        y_ticks=y_ticks,
        x_ticks=x_ticks,
    )


SPARK_WIDTH, SPARK_HEIGHT = 120, 24
"""A sparkline's area, in SVG units: a bar of 2 units per minute of the last hour."""


@dataclasses.dataclass(frozen=True)
class Sparkline:
    """A queue's last hour in a table's row: a bar per minute, succeeded below and failed
    above, each outcome's bars one SVG path, scaled to the busiest minute (a minute with
    any job at least one unit high, so that none is lost)."""

    succeeded_path: str
    failed_path: str
    succeeded: int
    failed: int
    peak: int
    start: str
    width: int = SPARK_WIDTH
    height: int = SPARK_HEIGHT


def sparkline(buckets: Sequence[ThroughputBucket]) -> Sparkline:
    """The sparkline of a queue's minutes (oldest first), as `admin.last_hour` gives them."""
    peak = max((b.succeeded + b.failed for b in buckets), default=0)
    scale = SPARK_HEIGHT / peak if peak else 0.0
    slot = SPARK_WIDTH / max(len(buckets), 1)
    width = round(max(slot - 0.4, 0.4), 2)
    succeeded: list[str] = []
    failed: list[str] = []
    for n, bucket in enumerate(buckets):
        x = round(n * slot, 2)
        ok = max(bucket.succeeded * scale, 1.0) if bucket.succeeded else 0.0
        bad = max(bucket.failed * scale, 1.0) if bucket.failed else 0.0
        if ok:
            succeeded.append(_bar(x, max(SPARK_HEIGHT - ok, 0.0), width, ok))
        if bad:
            failed.append(_bar(x, max(SPARK_HEIGHT - ok - bad, 0.0), width, bad))
    return Sparkline(
        succeeded_path="".join(succeeded),
        failed_path="".join(failed),
        succeeded=sum(b.succeeded for b in buckets),
        failed=sum(b.failed for b in buckets),
        peak=peak,
        start=_hm(buckets[0].start) if buckets else "",
    )


def _bar(x: float, y: float, width: float, height: float) -> str:
    """A bar as a closed SVG path: from its top left corner, across, down, back."""
    return f"M{x} {round(y, 2)}h{width}v{round(height, 2)}h-{width}z"


def _count(value: int) -> str:
    """A scale's label, short: 900, 1.5k, 20k, 3M."""
    for suffix, size in (("M", 1_000_000), ("k", 1_000)):
        if value >= size:
            return f"{value / size:.3g}{suffix}"
    return str(value)


def _hm(moment: Any) -> str:
    return f"{moment.astimezone(timezone.utc):%H:%M}"


# Durations over time: a queue and job type's wait or run, its p50 and p95 as lines ----------

LINES_WIDTH, LINES_HEIGHT = 240, 90
"""A duration chart's plot area, in SVG units: about as many as the pixels it takes, four
side by side on a wide screen, so that its text keeps its size."""
LINES_LEFT = 54
"""Its left margin: room for a scale's label such as "1000 ms"."""


@dataclasses.dataclass(frozen=True)
class Slot:
    """A slot of a duration chart in which jobs finished: where it lies, its tooltip, and
    the link to those jobs."""

    x: float
    width: float
    title: str
    href: str | None = None


@dataclasses.dataclass(frozen=True)
class Lines:
    """A duration's 50th and 95th percentiles over time slots (hours or minutes), each as
    one SVG path (a slot without a finished job is a gap), over a scale of round durations;
    a slot with jobs is a hover area with its figures (and a link to its jobs)."""

    label: str
    p50_path: str
    p95_path: str
    p50_dots: str
    p95_dots: str
    """Each point as a dot (a path of round-capped marks), so that a slot alone shows."""
    slots: list[Slot]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    peak: timedelta
    width: int = LINES_WIDTH
    height: int = LINES_HEIGHT
    left: int = LINES_LEFT
    top: int = TOP
    view_width: int = LINES_LEFT + LINES_WIDTH + RIGHT
    view_height: int = TOP + LINES_HEIGHT + BOTTOM

    @property
    def linked(self) -> bool:
        return any(slot.href for slot in self.slots)


_UNITS = (("h", 3600.0), ("min", 60.0), ("s", 1.0), ("ms", 0.001))
"""The units of a duration scale, from the largest: a scale takes the largest its peak
reaches."""


def lines(
    timings: Sequence[Any],
    metric: str,
    start: datetime,
    count: int,
    step: timedelta,
    label: str,
    link: Link | None = None,
) -> Lines:
    """The chart of `metric` ("wait" or "run") of `admin.Timing`s of one queue and job type,
    over `count` slots of `step` from `start` (each Timing in the slot its start falls in),
    described by `label`; each slot with jobs a link to them with `link`."""
    by_slot: dict[int, Any] = {}
    for timing in timings:
        n = int((timing.start - start) / step)
        if 0 <= n < count:
            by_slot[n] = timing
    p50 = {n: getattr(t, f"{metric}_p50").total_seconds() for n, t in by_slot.items()}
    p95 = {n: getattr(t, f"{metric}_p95").total_seconds() for n, t in by_slot.items()}
    peak = max(p95.values(), default=0.0)
    unit, size = next(((u, s) for u, s in _UNITS if peak >= s), _UNITS[-1])
    scale_step = _nice(peak / size) * size if peak else size
    top = scale_step * max(1, math.ceil(peak / scale_step - 1e-9))
    slot_width = LINES_WIDTH / max(count, 1)

    def y(seconds: float) -> float:
        return round(LINES_HEIGHT - seconds / top * LINES_HEIGHT, 2)

    def x(n: int) -> float:
        return round(n * slot_width + slot_width / 2, 2)

    slots = [
        Slot(
            x=round(n * slot_width, 2),
            width=round(slot_width, 2),
            title=f"{_hm(t.start)} to {_hm(t.start + step)} UTC: {t.jobs} job"
            f"{'' if t.jobs == 1 else 's'}, {metric} p50 {_seconds(p50[n])}, "
            f"p95 {_seconds(p95[n])}",
            href=link(t.start, t.start + step) if link else None,
        )
        for n, t in sorted(by_slot.items())
    ]
    steps = round(top / scale_step)
    y_ticks = [
        Tick(y(k * scale_step), _scale_label(k * scale_step / size, unit)) for k in range(steps + 1)
    ]
    every = max(1, math.ceil(count / 4))
    x_ticks = [
        Tick(round(n * slot_width, 2), _hm(start + n * step) if n % every == 0 else "")
        for n in range(0, count, every)
    ]
    p50_points = {x(n): y(v) for n, v in sorted(p50.items())}
    p95_points = {x(n): y(v) for n, v in sorted(p95.items())}
    return Lines(
        label=label,
        p50_path=_path(p50_points, slot_width),
        p95_path=_path(p95_points, slot_width),
        p50_dots=_dots(p50_points),
        p95_dots=_dots(p95_points),
        slots=slots,
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        peak=timedelta(seconds=peak),
    )


def _nice(peak: float, steps: int = Y_TICKS) -> float:
    """The smallest round step (1, 2 or 5 times a power of ten, fractions too) that reaches
    `peak` in at most `steps` steps."""
    power = 10.0 ** math.floor(math.log10(peak / steps))
    for factor in (1, 2, 5, 10):
        if factor * power * steps >= peak * (1 - 1e-9):
            return factor * power
    return 10 * power  # pragma: no cover - the loop always returns


def _path(points: dict[float, float], slot_width: float) -> str:
    """An SVG path through the points (x to y) whose slots are next to each other, a gap
    where slots are missing; a point alone is a dot (drawn with round caps)."""
    parts: list[str] = []
    previous: float | None = None
    alone = False
    for x, y in points.items():
        if previous is not None and abs(x - previous - slot_width) < 0.01:
            parts.append(f"L{x} {y}")
            alone = False
        else:
            if alone:
                parts.append("h0.01")
            parts.append(f"M{x} {y}")
            alone = True
        previous = x
    if alone:
        parts.append("h0.01")
    return "".join(parts)


def _dots(points: dict[float, float]) -> str:
    """A mark at each point, drawn as a dot by a round cap."""
    return "".join(f"M{x} {y}h0.01" for x, y in points.items())


def _scale_label(value: float, unit: str) -> str:
    return f"{value:g} {unit}"


def _seconds(seconds: float) -> str:
    """A duration for a tooltip: 12 ms, 4.25 s, 3.5 min, 2.0 h."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
