"""Real services on loopback, started and stopped by the tests that need them: an S3 API (moto's
server, from PyPI) and a PostgreSQL server (Debian's ``postgresql``, installed by ``make test``'s
``system-deps``). Each is a context manager that starts the process, waits until it answers and
stops exactly that process (by its id) on exit, whatever the test did."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

STARTUP_SECONDS = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    access_key: str = "privlake-test-key"
    secret_key: str = "privlake-test-secret"
    region: str = "us-east-1"

    def create_bucket(self, name: str) -> None:
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                              aws_secret_access_key=self.secret_key, region_name=self.region)
        client.create_bucket(Bucket=name)

    def keys(self, bucket: str) -> list[str]:
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                              aws_secret_access_key=self.secret_key, region_name=self.region)
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]


@contextlib.contextmanager
def s3_server(log_folder: Path) -> Iterator[S3Server]:
    """moto's S3 server on 127.0.0.1 (a separate process, so Spark's Python workers reach it too)."""
    port = free_port()
    executable = Path(sys.executable).parent / "moto_server"
    with (log_folder / "moto.log").open("wb") as log:
        process = subprocess.Popen([str(executable), "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                                   stderr=subprocess.STDOUT)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's S3 server did not start (see {log_folder / 'moto.log'})") from None
                time.sleep(0.2)
        yield S3Server(endpoint)
    finally:
        _stop(process)


@dataclass(frozen=True)
class PostgresServer:
    port: int
    user: str
    password: str
    database: str

    def uri(self, password: str | None = None) -> str:
        """The SQLAlchemy URI of the catalog database (``password`` in place of the real one, e.g.
        a ``${VARIABLE}`` reference for a config)."""
        shown = self.password if password is None else password
        return f"postgresql+psycopg2://{self.user}:{shown}@127.0.0.1:{self.port}/{self.database}"


def _postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: run `make system-deps` (Debian's postgresql)")
    return found[-1].parent


@contextlib.contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A throw-away PostgreSQL cluster on 127.0.0.1 with password authentication: ``initdb`` into a
    fresh folder (as the ``postgres`` user when run as root: ``initdb`` refuses root), started with
    ``pg_ctl``, one database for the catalog; stopped by its process id and deleted on exit."""
    bindir = _postgres_bin()
    as_root = os.geteuid() == 0
    run_as = ["runuser", "-u", "postgres", "--"] if as_root else []
    folder = Path(tempfile.mkdtemp(prefix="privlake-postgres-"))
    folder.chmod(0o755)
    data, sockets = folder / "data", folder / "sockets"
    password = secrets.token_hex(12)
    password_file = folder / "password"
    password_file.write_text(password + "\n")
    for path in (folder, password_file):
        if as_root:
            shutil.chown(path, "postgres", "postgres")
    password_file.chmod(0o600)
    port = free_port()
    process_id = None
    try:
        subprocess.run([*run_as, str(bindir / "initdb"), "-D", str(data), "-U", "privlake", "-A", "scram-sha-256",
                        f"--pwfile={password_file}", "--no-sync", "-E", "UTF8"],
                       check=True, capture_output=True, timeout=120)
        (sockets).mkdir()
        if as_root:
            shutil.chown(sockets, "postgres", "postgres")
        options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
        subprocess.run([*run_as, str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l",
                        str(folder / "postgres.log"), "-w", "-t", str(int(STARTUP_SECONDS)), "start"],
                       check=True, capture_output=True, timeout=STARTUP_SECONDS + 30)
        process_id = int((data / "postmaster.pid").read_text().split()[0])
        import psycopg2

        connection = psycopg2.connect(host="127.0.0.1", port=port, user="privlake", password=password,
                                      dbname="postgres")
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("CREATE DATABASE catalog")
        connection.close()
        yield PostgresServer(port, "privlake", password, "catalog")
    finally:
        if process_id is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process_id, signal.SIGINT)  # fast shutdown of exactly the server we started
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    os.kill(process_id, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process_id, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)
