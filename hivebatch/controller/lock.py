"""One controller at a time: an exclusive ``flock`` on a lock file.

The kernel drops the lock when the process dies, however it dies, so a killed controller never
leaves a stale lock behind; the PID written into the file is only for the message a second
controller prints.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from hivebatch.errors import HivebatchError


class AlreadyRunning(Exception):
    """Another controller holds the lock (not an error: cron simply tries again next minute)."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"another controller is running (pid {holder or '?'}, lock {path}); nothing to do")
        self.path = path
        self.holder = holder


class ControllerLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise HivebatchError(
                f"cannot open the controller lock file {self.path}: {exc.strerror}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            raise AlreadyRunning(self.path, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ControllerLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
