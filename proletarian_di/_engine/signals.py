"""SIGTERM and SIGINT for graceful stops, for the opt-in shutdown hook and the CLI.

A signal handler runs between two bytecodes of the main thread, perhaps inside
`logging` or while a lock is held, so it must never stop workers itself: the
handler here only records the signal and wakes whoever waits for it. The CLI
waits in its main loop; the hook waits in a thread of its own, stops the
worker there, and then passes the signal on to the handler that was there
before (by default: the process ends).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..worker import QueueWorker

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Signals:
    """Records SIGTERM/SIGINT and sets an event; a second signal calls `on_second`.

    Only the main thread may install signal handlers: elsewhere `install()` installs
    nothing (no signal will come).
    """

    def __init__(self, on_second: Callable[[int, FrameType | None], Any] | None = None) -> None:
        self.on_second = on_second
        self.received: list[int] = []
        self.previous: dict[int, Any] = {}
        self._event = threading.Event()
        self._forwarding: int | None = None

    def install(self) -> Signals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in SIGNALS:
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        """Put the previous handlers back (main thread only) and wake any waiter."""
        self._event.set()
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in self.previous.items():
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, previous)

    def __enter__(self) -> Signals:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def wait(self, timeout: float | None = None) -> int | None:
        """The first signal received, waiting up to `timeout`; None if none (or uninstalled)."""
        self._event.wait(timeout)
        return self.received[0] if self.received else None

    @property
    def first(self) -> str:
        return signal.Signals(self.received[0]).name if self.received else "signal"

    def forward(self, signum: int) -> None:
        """From any thread: have the main thread pass `signum` on to the previous handler."""
        self._forwarding = signum
        signal.pthread_kill(threading.main_thread().ident or 0, signum)

    def pass_on(self, signum: int, frame: FrameType | None) -> None:
        """In the main thread: restore the previous handler and let it have the signal."""
        previous = self.previous.get(signum, signal.SIG_DFL)
        with contextlib.suppress(ValueError):
            signal.signal(signum, previous)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            os.kill(os.getpid(), signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._forwarding == signum:
            self._forwarding = None
            self.pass_on(signum, frame)
            return
        self.received.append(signum)
        if len(self.received) == 1:
            self._event.set()
        elif self.on_second is not None:
            self.on_second(signum, frame)


def exit_now(signum: int, frame: FrameType | None) -> None:
    """A second signal: say so with a plain write (nothing reentrant) and exit at once."""
    message = (
        f"second {signal.Signals(signum).name}: exiting now; jobs still running are "
        "rolled back by the database and will run again\n"
    )
    with contextlib.suppress(OSError):
        os.write(2, message.encode())
    os._exit(128 + signum)


def stop_all(workers: Sequence[QueueWorker]) -> bool:
    """Stop every worker at the same time (so all stop polling now); True if none abandoned."""
    results: dict[str, bool] = {}

    def stop(worker: QueueWorker) -> None:
        results[worker.queue_worker_id] = worker.stop()

    threads = [
        threading.Thread(target=stop, args=(w,), name=f"stop-{w.queue_worker_id}") for w in workers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return all(results.values())


def total_summary(workers: Sequence[QueueWorker]) -> tuple[dict[str, int], str]:
    """The workers' job outcomes added up, and as a line ("3 succeeded, 0 failed, …")."""
    totals: dict[str, int] = {}
    for worker in workers:
        for outcome, count in worker.summary().items():
            totals[outcome] = totals.get(outcome, 0) + count
    return totals, ", ".join(f"{count} {outcome}" for outcome, count in totals.items())


class ShutdownHook:
    """The opt-in hook of `install_shutdown_hook=True`: on SIGTERM or SIGINT, stop the worker
    gracefully (waiting for a start in progress), print a summary, then pass the signal on.

    A second signal passes on at once.
    """

    def __init__(
        self, name: str, stop: Callable[[], bool], summary: Callable[[], dict[str, int]]
    ) -> None:
        self.name, self.stop, self.summary = name, stop, summary
        self.signals: Signals | None = None
        self._passed_on = threading.Lock()

    def install(self) -> None:
        """From `start()`, in the main thread."""
        if threading.current_thread() is not threading.main_thread():
            raise ConfigurationError(
                "install_shutdown_hook=True needs start() to be called from the main thread"
            )
        self.signals = Signals(on_second=self._pass_on_now).install()
        threading.Thread(target=self._watch, name=f"{self.name}-signals", daemon=True).start()

    def uninstall(self, deliver: bool = False) -> None:
        """Put the previous handlers back; with `deliver` (a failed start), re-raise a signal
        that came meanwhile, so that it still has its usual effect."""
        signals = self.signals
        if signals is None:
            return
        signals.uninstall()
        if deliver and signals.received and self._passed_on.acquire(blocking=False):
            signal.raise_signal(signals.received[0])

    def _watch(self) -> None:
        signals = self.signals
        assert signals is not None
        signum = signals.wait()
        if signum is None or not self._passed_on.acquire(blocking=False):
            return
        clean = self.stop()
        counts = self.summary()
        print(
            f"{self.name} stopped on {signal.Signals(signum).name}"
            f"{'' if clean else ' (jobs abandoned, they will run again)'}: "
            + ", ".join(f"{n} {outcome}" for outcome, n in counts.items()),
            file=sys.stderr,
            flush=True,
        )
        signals.forward(signum)

    def _pass_on_now(self, signum: int, frame: FrameType | None) -> None:
        assert self.signals is not None
        self.signals.pass_on(signum, frame)
