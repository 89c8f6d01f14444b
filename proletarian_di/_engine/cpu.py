"""A worker's threads share one CPU while they run the queue's own code (`share_cpu`).

Only one thread of a process runs Python at a time (the GIL). When a worker thread's
reply from the database wakes it on one CPU while another worker thread holds the GIL on
the other, the woken thread sleeps again until the GIL is handed to it, across CPUs: two
wake-ups per job instead of one, each charged to the process (on a virtual machine tens of
microseconds). Kept on one CPU, the threads take turns without those cross-CPU hand-offs
(what it saves: docs/performance.md). A handler runs on the thread's own CPUs, so work it
spreads over threads or processes of its own is not confined.
"""

from __future__ import annotations

import contextlib
import os
import sys


def shared_cpu(threads: int) -> int | None:
    """The CPU a worker's `threads` threads share, or None where sharing would not help:
    one thread, one CPU allowed, no `sched_setaffinity` (not Linux), or no GIL."""
    if threads < 2 or not hasattr(os, "sched_setaffinity"):
        return None
    gil_enabled = getattr(sys, "_is_gil_enabled", None)
    if gil_enabled is not None and not gil_enabled():
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return choose_cpu(cpus, interrupt_time(), os.getpid())


QUIET_SLACK = 100
"""Interrupt time (in clock ticks, a second at the usual 100 a second) by which a CPU may
exceed the quietest and still count as quiet."""


def choose_cpu(cpus: list[int], interrupts: dict[int, int], pid: int) -> int:
    """One of `cpus`: among the quiet ones (no more than 1.5 times the interrupt time of
    the quietest, give or take `QUIET_SLACK`), the one `pid` falls on, so that a host's
    worker processes spread over them. A CPU that serves a disk's or a network card's
    interrupts (here, a local database's commits) would keep waking the threads' CPU."""
    least = min(interrupts.get(cpu, 0) for cpu in cpus)
    quiet = [cpu for cpu in cpus if interrupts.get(cpu, 0) <= least * 1.5 + QUIET_SLACK]
    return quiet[pid % len(quiet)]


def interrupt_time() -> dict[int, int]:
    """Clock ticks each CPU spent serving interrupts since boot (`irq` and `softirq` of
    /proc/stat); {} where it cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            lines = stat.read().splitlines()
    except OSError:
        return {}
    times = {}
    for line in lines:
        name, _, rest = line.partition(" ")
        fields = rest.split()
        if name[3:].isdigit() and name[:3] == "cpu" and len(fields) >= 7:
            irq, softirq = fields[5], fields[6]
            if irq.isdigit() and softirq.isdigit():
                times[int(name[3:])] = int(irq) + int(softirq)
    return times


class Pin:
    """One worker thread's hold on the shared CPU: `narrow` keeps it there, `widen` gives it
    back its own CPUs (for a handler). Made in the thread itself; an error from the system
    (the CPU left the process's cpuset, say) ends the pinning, never the thread."""

    def __init__(self, cpu: int) -> None:
        self._own = os.sched_getaffinity(0)
        self._shared = {cpu}
        self._on = cpu in self._own
        self.narrow()

    def narrow(self) -> None:
        """Run on the shared CPU from now on."""
        self._set(self._shared)

    def widen(self) -> None:
        """Run on the thread's own CPUs from now on."""
        self._set(self._own)

    def _set(self, cpus: set[int]) -> None:
        if not self._on:
            return
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:
            self._on = False
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, self._own)
