"""A real S3-compatible server on localhost for the shared-store tests and benchmark:
moto's server mode (``pip install 'moto[server]'``, in the ``test`` dependency group), in
a process of its own so that a test can kill or freeze it mid-run.

Only 127.0.0.1 is ever contacted; the environment given to clients disables the EC2
metadata lookup botocore would otherwise try when credentials are missing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

#: What is missing for a local S3 store, or None when nothing is: the tests fail with it
#: (the test dependency group has moto's server, and `nox -s tests` installs the `remote`
#: extra's fsspec and s3fs), the benchmark stops with it.
MISSING = next(
    (
        f"{name} is not installed: a shared store on a local S3 server needs moto's server "
        "mode and s3fs (pip install 'moto[server]' 'jaxtune[remote]', or `pip install "
        "--group test` with the `remote` extra, as `nox -s tests` does)"
        for name in ("fsspec", "s3fs", "moto", "flask", "boto3")
        if importlib.util.find_spec(name) is None
    ),
    None,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """``python -m moto.server`` on a free port of 127.0.0.1. With ``refuse`` every
    request must carry credentials its IAM knows, and none are created: it refuses them
    all (403, as S3 does for an unknown access key)."""

    def __init__(self, *, refuse: bool = False, startup_s: float = 120.0) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        if refuse:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        self.log = pathlib.Path(tempfile.mkstemp(prefix="moto-", suffix=".log")[1])
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + startup_s
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"moto's server did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def env(self) -> dict[str, str]:
        """The variables a client needs: this endpoint, test credentials, no metadata."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def bucket(self) -> str:
        """A new, empty bucket's name."""
        import boto3

        name = f"jaxtune-{uuid.uuid4().hex[:12]}"
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=name)
        return name

    def freeze(self) -> None:
        """Stops the server without closing its port: requests hang (SIGSTOP)."""
        self.process.send_signal(signal.SIGSTOP)

    def stop(self) -> None:
        """Ends the server (requests are refused from now on)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=30)
        self.log.unlink(missing_ok=True)
