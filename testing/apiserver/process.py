"""`ApiServerProcess`: the same emulator in a child process, for benchmarks.

In-process, the emulator's thread and the operator under test share one GIL; a benchmark
that wants the operator's own figures runs the emulator here instead. The fault hooks go
over HTTP (`/_emulator/...`); the store is not reachable directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]


class ApiServerProcess:
    def __init__(self, *, crds: bool = True, bookmark_interval: float = 5.0, port: int = 0) -> None:
        self.args = [
            sys.executable,
            "-m",
            "testing.apiserver",
            "--port",
            str(port),
            "--bookmark-interval",
            str(bookmark_interval),
        ] + (["--crds"] if crds else [])
        self._process: subprocess.Popen[str] | None = None
        self._url: str | None = None

    def start(self, timeout: float = 20.0) -> Self:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self._process = subprocess.Popen(
            self.args,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline().strip()  # the child prints its URL first
        if not line.startswith("http://127.0.0.1:"):
            self.stop()
            raise RuntimeError(f"the emulator process did not start: {line!r}")
        self._url = line
        return self

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("the emulator process is not started")
        return self._url

    def stop(self, timeout: float = 10.0) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()  # the child exits when its stdin closes
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _control(self, method: str, action: str, **kwargs: Any) -> Any:
        response = httpx.request(method, f"{self.url}/_emulator/{action}", timeout=10, **kwargs)
        response.raise_for_status()
        return response.json()

    def stats(self) -> dict[str, Any]:
        result: dict[str, Any] = self._control("GET", "stats")
        return result

    def fail(self, status: int, **rule: Any) -> None:
        """As `Faults.fail(status, method=, path=, watch=, times=, reason=, message=)`."""
        self._control("POST", "faults", json={"status": status, **rule})

    def delay(self, seconds: float, **rule: Any) -> None:
        """As `Faults.delay(seconds, method=, path=, watch=, times=)`."""
        self._control("POST", "faults", json={"delay": seconds, **rule})

    def clear_faults(self) -> None:
        self._control("DELETE", "faults")

    def drop_watches(self, *, abort: bool = False) -> int:
        dropped: int = self._control("POST", "drop-watches", params={"abort": str(abort).lower()})[
            "dropped"
        ]
        return dropped

    def expire_watches(self, *, drop: bool = True) -> None:
        self._control("POST", "expire-watches", params={"drop": str(drop).lower()})
