"""Child processes of the test bed: free ports, dying with the parent, one handle per process.

Every component (etcd, the apiserver, an operator, ...) runs as a `Process`: spawned in its own
session with its output in a log file, killed by the kernel if the test run dies (even by
SIGKILL), stopped with SIGTERM then SIGKILL, and its log's last lines quoted when it fails.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

__all__ = [
    "HOST",
    "KEPT",
    "LOG_TAIL_LINES",
    "Process",
    "child_env",
    "describe_holder",
    "die_with_parent",
    "free_port",
    "lock_holder",
    "lock_path",
    "machine_lock",
    "port_free",
    "tail",
]

#: Every server of the test bed listens here.
HOST = "127.0.0.1"
LOG_TAIL_LINES = 40
_PR_SET_PDEATHSIG = 1
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def port_free(port: int) -> bool:
    """Whether ``port`` can be bound on every interface (as a Go listener would bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go's listeners do
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


def die_with_parent() -> None:
    """Runs in the child before exec: get SIGKILL when the parent dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus ``extra``, with no proxy for 127.0.0.1."""
    env = {**os.environ, **(extra or {})}
    env["NO_PROXY"] = env["no_proxy"] = f"{HOST},localhost"
    for variable in _PROXY_VARIABLES:
        env.pop(variable, None)
    return env


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file, or "(no log)"."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


#: How a lock's holder marks itself as staying (a kept demo): a waiter gives up at once.
KEPT = "kept: "


def lock_path(name: str) -> Path:
    """The file behind ``machine_lock(name)``; it holds a line saying who holds the lock."""
    return Path("/tmp") / f"podium-operators-{name}.lock"


def lock_holder(name: str) -> str:
    """Who holds ``machine_lock(name)`` (or last held it), as they said: ``""`` when unknown."""
    with contextlib.suppress(OSError):
        return lock_path(name).read_text().strip()
    return ""


def describe_holder(name: str, text: str) -> None:
    """Say who holds ``machine_lock(name)`` (call it while holding the lock): ``KEPT`` first
    makes every waiter give up at once, naming ``text``, instead of waiting for its timeout."""
    path = lock_path(name)
    with path.open("r+") as handle:
        handle.truncate(0)
        handle.write(text + "\n")


@contextlib.contextmanager
def machine_lock(name: str, *, timeout: float) -> Iterator[None]:
    """An exclusive lock shared by every process on this machine (for fixed ports and paths).
    The holder writes who it is into the file; a holder that stays (``KEPT``, a kept demo) is
    not waited for: ``TimeoutError`` at once, saying who it is and how to stop it."""
    path = lock_path(name)
    with path.open("a+") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = lock_holder(name)
                if holder.startswith(KEPT):
                    raise TimeoutError(f"{path} is held by {holder[len(KEPT) :]}") from None
                if time.monotonic() > deadline:
                    who = f" ({holder})" if holder else ""
                    raise TimeoutError(f"{path} is held by another process{who}") from None
                time.sleep(0.5)
        handle.seek(0)
        handle.truncate(0)
        handle.write(f"pid {os.getpid()} ({' '.join(sys.argv)[:200]})\n")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)  # nobody holds it now
            handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)


class StartStop:
    """``with thing:`` starts it, and stops it whatever happens inside (the control plane, an
    operator)."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@dataclass
class Process:
    """One child process with its output in ``log_path``."""

    name: str
    args: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @classmethod
    def spawn(
        cls,
        name: str,
        args: Sequence[str],
        *,
        log_path: Path,
        cwd: Path,
        env: Mapping[str, str] | None = None,
    ) -> Process:
        """Start ``args`` in a session of its own, stdout and stderr appended to ``log_path``,
        ``env`` on top of this process's environment (no proxies)."""
        process = cls(name=name, args=list(args), log_path=log_path)
        with log_path.open("ab") as log:
            process.popen = subprocess.Popen(
                process.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=child_env(env),
                start_new_session=True,
                # Only async-signal-safe work in the child (one prctl call).
                preexec_fn=die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
            )
        return process

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return tail(self.log_path, lines)

    def failure(self, message: str) -> str:
        """``message`` with the last lines of the log, for an exception."""
        return f"{self.name}: {message}\n--- last lines of {self.log_path} ---\n{self.tail()}"

    def wait_ready(
        self,
        ready: Callable[[], bool],
        *,
        timeout: float,
        error: type[Exception],
        transient: tuple[type[BaseException], ...] = (OSError,),
    ) -> None:
        """Poll ``ready`` (its ``transient`` exceptions count as not yet) until true; raise
        ``error`` with the log's tail when the process exits or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.running():
                raise error(self.failure(f"exited with code {self.returncode}"))
            try:
                if ready():
                    return
            except transient:
                pass
            if time.monotonic() > deadline:
                raise error(self.failure(f"not ready after {timeout}s"))
            time.sleep(0.25)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the process group, SIGKILL if it is still there after ``timeout``."""
        popen = self.popen
        if popen is None or popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGTERM)
        try:
            popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()
