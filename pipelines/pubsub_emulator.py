"""A local Google Cloud Pub/Sub emulator for tests and demos, started and stopped by process id.

Used by ``tests/test_pubsub_emulator.py``, the streaming demo (``pipelines.demo_beam``) and
``bench.pipeline``; the binary is the Cloud SDK's (``PUBSUB_EMULATOR_BIN`` overrides the path).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

__all__ = ["PubSubEmulator"]


class PubSubEmulator:
    """Starts the Google Cloud Pub/Sub emulator on 127.0.0.1 (a free port) and stops it by PID.

    Use as a context manager; ``host`` is the value for ``PUBSUB_EMULATOR_HOST``. The emulator runs in its
    own process group, which :meth:`stop` terminates (and nothing else).
    """

    DEFAULT_BINARY = "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator"

    def __init__(
        self, binary: str | None = None, project: str = "ldp-demo", log_path: str | None = None
    ) -> None:
        self.binary = binary or os.environ.get("PUBSUB_EMULATOR_BIN", self.DEFAULT_BINARY)
        self.project = project
        self.log_path = log_path
        self.proc = None
        self.host = None

    @classmethod
    def available(cls, binary: str | None = None) -> bool:
        b = binary or os.environ.get("PUBSUB_EMULATOR_BIN", cls.DEFAULT_BINARY)
        return os.path.isfile(b) and os.access(b, os.X_OK)

    def start(self, timeout_s: float = 60.0) -> PubSubEmulator:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        log = open(self.log_path or os.devnull, "wb")  # noqa: SIM115 - kept open for the child
        self.proc = subprocess.Popen(
            [self.binary, "--host=127.0.0.1", f"--port={port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.host = f"127.0.0.1:{port}"
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Pub/Sub emulator exited with status {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"Pub/Sub emulator did not listen on {self.host} within {timeout_s} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # the group the emulator's own launcher created
                self.proc.wait(timeout=10)
            except (ProcessLookupError, PermissionError):
                pass
            except Exception:  # noqa: BLE001 - still running: force it
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None

    def env(self) -> dict[str, str]:
        """A copy of ``os.environ`` with ``PUBSUB_EMULATOR_HOST`` set."""
        return {**os.environ, "PUBSUB_EMULATOR_HOST": self.host}

    def __enter__(self) -> PubSubEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
