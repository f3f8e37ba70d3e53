"""moto's standalone S3 server for sweep tests (design.md: `moto_server -H 127.0.0.1 -p
PORT`, read through fsspec and s3fs with AWS_ENDPOINT_URL)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

BUCKET = "zoo"
TEMP_MARKS = (b"parity-pair-", b"parity-inputs-", b"/uri/uri0/")
"""What a temporary folder of a pair looks like in a file: never in --out."""


class Moto:
    """moto's standalone S3 server in a process of its own, stopped and started again on the
    same port (its objects go with it: `put` them again)."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_MAX_ATTEMPTS": "1",  # botocore's own retries off: the sweep's are tested
            "AWS_ENDPOINT_URL": self.url,
        }
        """What a process reading this server needs in its environment."""

    def start(self) -> None:
        """Start it on its port; under load another process can take a port between choosing
        it and binding it, so the server is asked an S3 question (not only connected to) and
        a server that exited is started again on the same port a few times."""
        for _ in range(5):
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._answers(deadline=time.monotonic() + 120):
                return
            self.stop()
            time.sleep(1.0)
        raise RuntimeError(f"moto's server did not start on port {self.port}")

    def _answers(self, *, deadline: float) -> bool:
        import boto3
        import botocore.config

        config = botocore.config.Config(retries={"max_attempts": 1}, connect_timeout=2)
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False  # it exited: the port was taken
            with socket.socket() as s:
                listening = s.connect_ex(("127.0.0.1", self.port)) == 0
            if listening:
                try:
                    boto3.client(
                        "s3",
                        endpoint_url=self.url,
                        region_name="us-east-1",
                        aws_access_key_id="testing",
                        aws_secret_access_key="testing",
                        config=config,
                    ).list_buckets()
                    return True
                except Exception:
                    pass
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None

    def put(self, key: str, data: bytes) -> None:
        import boto3

        if self.proc is None or self.proc.poll() is not None:  # gone since (a killed process)
            self.start()

        s3 = boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        buckets = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
        if BUCKET not in buckets:
            s3.create_bucket(Bucket=BUCKET)
        s3.put_object(Bucket=BUCKET, Key=key, Body=data)


def tree_bytes(out: Path) -> dict[str, bytes]:
    """Every file under `out` as bytes; a saved run's zip members decompressed."""
    found: dict[str, bytes] = {}
    for path in sorted(out.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(out).as_posix()
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                for member in z.namelist():
                    found[f"{rel}:{member}"] = z.read(member)
        else:
            found[rel] = path.read_bytes()
    return found
