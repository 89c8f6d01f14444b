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
    """Installed by `start()` when `install_shutdown_hook=True`, removed by `stop()`."""

    def __init__(self, worker: QueueWorker) -> None:
        self.worker = worker
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise ConfigurationError(
                "install_shutdown_hook=True needs start() to be called from the main thread"
            )
        for sig in SIGNALS:
            self.previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in self.previous.items():
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
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
