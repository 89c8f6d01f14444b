"""The opt-in SIGTERM/SIGINT hook: stop gracefully, print a summary, then chain."""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError

if TYPE_CHECKING:
    from .worker import QueueWorker

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class ShutdownHook:
    """Installed by `start()` when `install_shutdown_hook=True`, removed by `stop()`.

    A signal that arrives while the worker is still starting is kept, and acted
    on as soon as it has started (or, if the start fails, passed on).
    """

    def __init__(self, worker: QueueWorker) -> None:
        self.worker = worker
        self.previous: dict[int, Any] = {}
        self.pending: int | None = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise ConfigurationError(
                "install_shutdown_hook=True needs start() to be called from the main thread"
            )
        self.pending = None
        for sig in SIGNALS:
            self.previous[sig] = signal.signal(sig, self._handle)

    def started(self) -> None:
        """Act on a signal that came during `start()`."""
        signum, self.pending = self.pending, None
        if signum is not None:
            self._handle(signum, None)

    def uninstall(self, deliver: bool = False) -> None:
        """Put the previous handlers back; with `deliver`, re-raise a signal kept meanwhile."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in self.previous.items():
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, previous)
        signum, self.pending = self.pending, None
        if deliver and signum is not None:
            signal.raise_signal(signum)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.worker.state in ("new", "starting"):
            self.pending = signum
            return
        if self.worker.running:
            clean = self.worker.stop()
            counts = self.worker.summary()
            print(
                f"{self.worker.queue_worker_id} stopped on {signal.Signals(signum).name}"
                f"{'' if clean else ' (jobs abandoned, they will run again)'}: "
                + ", ".join(f"{n} {outcome}" for outcome, n in counts.items()),
                file=sys.stderr,
                flush=True,
            )
        previous = self.previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
