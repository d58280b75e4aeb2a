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

__all__ = ["PubSubEmulator", "allow_large_messages"]


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


_MESSAGE_OPTIONS = (("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1))


def allow_large_messages() -> None:
    """Lifts gRPC's default 4 MiB receive limit on the channels the Pub/Sub client opens to the emulator
    (``PUBSUB_EMULATOR_HOST`` set): without it, one message over 4 MiB (Pub/Sub allows 10 MB) fails every
    pull that contains it and the DirectRunner's read gives up. Idempotent; a no-op without the emulator.
    """
    if not os.environ.get("PUBSUB_EMULATOR_HOST"):
        return
    import grpc

    if getattr(grpc, "_ldp_large_messages", False):
        return

    def merged(options):
        opts = list(options or [])
        names = {k for k, _ in opts}
        return opts + [o for o in _MESSAGE_OPTIONS if o[0] not in names]

    insecure, secure = grpc.insecure_channel, grpc.secure_channel

    def insecure_channel(target, options=None, compression=None):
        return insecure(target, options=merged(options), compression=compression)

    def secure_channel(target, credentials, options=None, compression=None):
        return secure(target, credentials, options=merged(options), compression=compression)

    grpc.insecure_channel = insecure_channel
    grpc.secure_channel = secure_channel
    grpc._ldp_large_messages = True
