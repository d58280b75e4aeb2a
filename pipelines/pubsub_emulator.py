"""A local Google Cloud Pub/Sub emulator for tests and demos, started and stopped by process id, and the
check that a Pub/Sub job can reach Pub/Sub at all before it starts.

Used by ``tests/test_pubsub_emulator.py``, the streaming demo (``pipelines.demo_beam``) and
``bench.pipeline``; the binary is the Cloud SDK's (``PUBSUB_EMULATOR_BIN`` overrides the path).
:func:`pubsub_access_problem` is what the jobs ask before a Pub/Sub source or sink is built: without
``PUBSUB_EMULATOR_HOST`` and without Google credentials the client library would print credential
tracebacks, the job would run reading nothing and exit 0.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time

__all__ = ["PubSubEmulator", "allow_large_messages", "pubsub_access_problem"]

#: ``HOST:PORT`` (a name, an IPv4 address or a bracketed IPv6 address, and a port).
_EMULATOR_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")


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


def pubsub_access_problem(environ: dict[str, str] | None = None) -> str | None:
    """Why a Pub/Sub job could not reach Pub/Sub (one line), or None when it can try.

    Local checks only, no network call, in the order ``google.auth.default()`` looks:
    ``PUBSUB_EMULATOR_HOST`` (which must be ``HOST:PORT``) means the emulator; else
    ``GOOGLE_APPLICATION_CREDENTIALS`` must name a readable file; else the gcloud SDK's
    application-default credentials file (``gcloud auth application-default login``); else a machine
    whose DMI product name says Google Compute Engine (its metadata server holds the credentials).
    ``google.auth.default()`` itself is not called: on a machine without credentials it spends about
    3.4 s retrying the metadata server before it gives up."""
    env = os.environ if environ is None else environ
    host = env.get("PUBSUB_EMULATOR_HOST")
    if host is not None:
        m = _EMULATOR_HOST.match(host.strip())
        if not m or not 0 < int(m.group(2)) < 65536:
            return f"PUBSUB_EMULATOR_HOST={host!r} is not HOST:PORT (e.g. 127.0.0.1:8085)"
        return None
    hint = ("start the emulator and `export PUBSUB_EMULATOR_HOST=127.0.0.1:PORT` (README, 'Streaming'), or "
            "give Google credentials (GOOGLE_APPLICATION_CREDENTIALS=KEY.json or "
            "`gcloud auth application-default login`)")
    path = env.get("GOOGLE_APPLICATION_CREDENTIALS")
    if path:
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            return f"GOOGLE_APPLICATION_CREDENTIALS={path!r} is not a readable file; {hint}"
        return None
    adc = _gcloud_adc_path(env)
    if adc is not None and os.path.isfile(adc) and os.access(adc, os.R_OK):
        return None
    if _on_compute_engine():
        return None
    return f"Pub/Sub without PUBSUB_EMULATOR_HOST and without Google credentials; {hint}"


def _gcloud_adc_path(env: dict[str, str] | os._Environ[str]) -> str | None:
    """Where ``gcloud auth application-default login`` leaves its file (``$CLOUDSDK_CONFIG``, else the
    user's gcloud configuration directory)."""
    config = env.get("CLOUDSDK_CONFIG")
    if not config:
        if os.name == "nt":
            appdata = env.get("APPDATA")
            if not appdata:
                return None
            config = os.path.join(appdata, "gcloud")
        else:
            config = os.path.join(os.path.expanduser("~"), ".config", "gcloud")
    return os.path.join(config, "application_default_credentials.json")


#: The DMI product name of a Compute Engine machine starts with "Google" (read by google-auth as well).
_GCE_PRODUCT_NAME_FILE = "/sys/class/dmi/id/product_name"


def _on_compute_engine() -> bool:
    try:
        with open(_GCE_PRODUCT_NAME_FILE, encoding="utf-8") as fh:
            return fh.read().strip().startswith("Google")
    except OSError:
        return False
