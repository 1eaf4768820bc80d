"""The release secret never reaches a file (issue 12, item 6): not Spark's local dir, not the lake,
not the temp dir — while a release runs, after it, and after a run killed with SIGKILL.

Each release runs in a child process (``driver.py`` below, the CLI's ``main`` with two test hooks)
so that it has its own driver JVM whose ``spark.local.dir`` and temp dir (``TMPDIR`` for Python,
``java.io.tmpdir`` for the JVM) are this test's folders, and so that it can be killed. The hooks:

* every process of the run (the driver and Spark's Python workers: ``sitecustomize.py`` on their
  ``PYTHONPATH``) records each key it derives from the secret (``stream_digest`` of
  ``transforms/core/keyed_randomness.py``: the HMAC that keys one stream of one purpose) into a
  file outside the scanned folders, so the scan looks for those keys too;
* the driver pauses before the engine closes (all jobs done, broadcasts, cached blocks and Python
  workers still alive, nothing published yet): the test scans there, then lets it go on (and scans
  again after it exited) or kills its whole session with SIGKILL (and scans what the crash left).

The scan (``Needles``) looks for the secret and every derived key (and each 16-byte half, the
Philox key and counter) as raw bytes, hex (both cases) and base64 (standard and URL-safe, at
every byte alignment), in every file and in gzip members. Folders are also polled while the run
goes on. Negative controls: planted encodings are found, and a Spark run without io encryption
whose side values are broadcast the way they were before this fix (secret included) is found out.
"""

from __future__ import annotations

import base64
import gzip
import os
import secrets
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.conftest import write_config

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_SECONDS = 300
MAX_FILE_BYTES = 256 * 1024 * 1024
_CHUNK_BYTES = 8 * 1024 * 1024
_URLSAFE = bytes.maketrans(b"+/", b"-_")

SITECUSTOMIZE = '''
"""Test hook (tests/e2e/test_secret_never_on_disk.py): record every key derived from the secret."""
import os

_LOG = os.environ.get("PRIVLAKE_SCAN_DIGESTS")
if _LOG:
    import transforms.core.keyed_randomness as _keyed

    _original = _keyed.stream_digest

    def stream_digest(secret, release_id, purpose, key):
        digest = _original(secret, release_id, purpose, key)
        with open(_LOG, "a", encoding="ascii") as log:
            log.write(f"{digest.hex()} {os.getpid()} {purpose}\\n")
        return digest

    _keyed.stream_digest = stream_digest
'''

DRIVER = '''
"""Test driver (tests/e2e/test_secret_never_on_disk.py): ``privlake`` with a pause before the
engine closes and, for the negative control, side values broadcast whole as before the fix."""
import os
import sys
import time
from pathlib import Path

checkpoint = Path(os.environ["PRIVLAKE_SCAN_CHECKPOINT"])
resume = checkpoint.with_name("resume")


def pause_before_close(engine_class):
    close = engine_class.close

    def paused(self, *args, **kwargs):
        if not checkpoint.exists():
            checkpoint.write_text(str(os.getpid()))
            deadline = time.monotonic() + 600
            while not resume.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return close(self, *args, **kwargs)

    engine_class.close = paused


if os.environ["PRIVLAKE_SCAN_ENGINE"] == "spark":
    from pipelines.engines.spark import SparkEngine

    pause_before_close(SparkEngine)
    if os.environ.get("PRIVLAKE_SCAN_LEAKY_SIDES"):
        def broadcast_whole_side(self, side):
            if side is None:
                return None
            handle = self._broadcast(side)
            return lambda: handle.value

        SparkEngine._side_reader = broadcast_whole_side
else:
    import apache_beam as beam

    from pipelines.engines.beam import BeamEngine

    pause_before_close(BeamEngine)
    graph_log = Path(os.environ["PRIVLAKE_SCAN_GRAPHS"])
    run = beam.Pipeline.run

    def run_and_record_graph(self, *args, **kwargs):
        from tests.e2e.test_secret_never_on_disk import pipeline_graph_bytes

        with open(graph_log, "ab") as log:
            log.write(pipeline_graph_bytes(self))
        return run(self, *args, **kwargs)

    beam.Pipeline.run = run_and_record_graph

from pipelines.cli import main

sys.exit(main(sys.argv[1:]))
'''


def pipeline_graph_bytes(pipeline) -> bytes:  # noqa: ANN001 - a Beam pipeline (Beam is imported lazily)
    """A Beam pipeline's graph as its runner would get it, with every pickled DoFn payload (base64 of
    bz2 or zlib) also decoded, and its options: what a scan of "the pipeline graph" must cover."""
    import bz2
    import zlib

    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    proto = pipeline.to_runner_api()
    parts = [proto.SerializeToString(), repr(pipeline._options.get_all_options()).encode()]
    for transform in proto.components.transforms.values():
        if transform.spec.urn != common_urns.primitives.PAR_DO.urn:
            continue
        payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload).do_fn.payload
        for decompress in (bz2.decompress, zlib.decompress):
            try:
                parts.append(decompress(base64.b64decode(payload)))
                break
            except (OSError, ValueError, zlib.error):
                continue
    return b"\n".join(parts)


def encodings(raw: bytes) -> set[bytes]:
    """``raw`` as bytes, hex in both cases, and the base64 characters (standard and URL-safe) that
    ``raw`` alone decides at each of the three byte alignments inside a longer base64 text."""
    forms = {raw, raw.hex().encode(), raw.hex().upper().encode()}
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw + b"\0\0")
        inner = encoded[-(-4 * shift // 3) : 4 * (shift + len(raw)) // 3]
        forms |= {inner, inner.translate(_URLSAFE)}
    return forms


@dataclass
class Needles:
    """The secret and keys derived from it, in every encoding, found by the first 8 bytes of each
    form (one vectorized ``isin`` per file, then an exact comparison)."""

    labelled: dict[bytes, str] = field(default_factory=dict)

    @classmethod
    def of(cls, secret: bytes) -> Needles:
        needles = cls()
        needles.add(secret, "the release secret")
        return needles

    def add(self, raw: bytes, label: str) -> None:
        pieces = {label: raw}
        if len(raw) == 32:
            pieces |= {f"{label} (first half)": raw[:16], f"{label} (second half)": raw[16:]}
        for name, piece in pieces.items():
            for form in encodings(piece):
                self.labelled.setdefault(form, name)

    def _index(self) -> tuple[np.ndarray, dict[int, list[bytes]]]:
        by_prefix: dict[int, list[bytes]] = {}
        for form in self.labelled:
            by_prefix.setdefault(int.from_bytes(form[:8], "little"), []).append(form)
        return np.array(sorted(by_prefix), dtype=np.uint64), by_prefix

    def find_in(self, data: bytes) -> list[str]:
        prefixes, by_prefix = self._index()
        found: list[str] = []
        for start in range(0, max(len(data) - 7, 0), _CHUNK_BYTES):
            window = np.frombuffer(data, np.uint8, count=min(_CHUNK_BYTES + 7, len(data) - start), offset=start)
            count = len(window) - 7
            words = np.zeros(count, dtype=np.uint64)
            for byte in range(8):
                words |= window[byte : byte + count].astype(np.uint64) << np.uint64(8 * byte)
            for offset in np.flatnonzero(np.isin(words, prefixes)).tolist():
                for form in by_prefix[int(words[offset])]:
                    if data.startswith(form, start + offset):
                        found.append(self.labelled[form])
        return sorted(set(found))

    def scan(self, roots: Iterable[Path], exclude: Iterable[Path] = (), newer_than: float | None = None) -> list[str]:
        """``path: what`` for every file under ``roots`` (not under ``exclude``; modified after
        ``newer_than`` if given) holding a needle. Files that vanish while scanned are skipped."""
        excluded = [path.resolve() for path in exclude]
        findings = []
        for path in files_under(roots):
            if any(path.is_relative_to(folder) for folder in excluded):
                continue
            try:
                status = path.stat()
                if not stat.S_ISREG(status.st_mode) or status.st_size > MAX_FILE_BYTES:
                    continue  # sockets and FIFOs (reading one would block), huge files
                if newer_than is not None and status.st_mtime < newer_than:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            contents = [data]
            if data[:2] == b"\x1f\x8b":
                try:
                    contents.append(gzip.decompress(data))
                except (OSError, EOFError):
                    pass
            for content in contents:
                findings += [f"{path}: {what}" for what in self.find_in(content)]
        return sorted(set(findings))


def files_under(roots: Iterable[Path]) -> list[Path]:
    files = []
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = Path(folder, name)
                if not path.is_symlink():
                    files.append(path.resolve())
    return files


@dataclass
class Observed:
    """What one scanned run showed: the findings while it ran (polling, then at the pause before the
    engine closes), after it (exited or killed), the files Spark's local dir held at the pause and
    after, the number of derived keys recorded, the exit code (``None``: killed)."""

    during: list[str]
    after: list[str]
    local_files_at_pause: list[Path]
    local_files_after: list[Path]
    derived_keys: dict[str, tuple[int, set[int]]]
    returncode: int | None
    driver_pid: int
    graphs: bytes = b""

    def assert_keys_recorded(self, on_workers: bool) -> None:
        """The scan looked for the keys the release derived: those of its synthesis (one per object
        and round), derived by Spark's Python workers (``on_workers``) or in the driver (Beam)."""
        keys, processes = self.derived_keys.get("crowd/synthesis", (0, set()))
        assert keys >= 30, f"the synthesis keys were not recorded: {self.derived_keys}"
        if on_workers:
            assert self.driver_pid not in processes, "Spark's Python workers' keys were not recorded"
        else:
            assert processes == {self.driver_pid}


class ScannedRun:
    """One release in a child process, with the folders the scan covers: ``tmp`` (the run's temp
    dir), ``spark_local`` (``spark.local.dir``), ``lake``; ``private`` holds the hooks, the derived
    keys and the child's output, and is not scanned."""

    def __init__(self, base: Path, claims: Path, engine: str):
        self.base = base
        self.engine = engine
        self.tmp, self.spark_local, self.lake, self.private = (
            base / "tmp", base / "spark-local", base / "lake", base / "private")
        for folder in (self.tmp, self.spark_local, self.private):
            folder.mkdir(parents=True)
        self.secret = secrets.token_bytes(32)
        (self.private / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
        (self.private / "driver.py").write_text(textwrap.dedent(DRIVER))
        self.claims = claims
        self.checkpoint = self.private / "checkpoint"
        self.digests = self.private / "derived-keys.txt"
        self.graphs = self.private / "graphs.bin"

    def config(self, spark_conf: dict[str, str] | None = None) -> Path:
        if self.engine == "spark":
            conf = {
                "spark.local.dir": str(self.spark_local),
                "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={self.tmp}",
                **(spark_conf or {}),
            }
            engine = {"name": "spark", "parallelism": 2, "spark": {"master": "local[2]", "conf": conf}}
        else:
            engine = {"name": "beam", "parallelism": 2}
        return write_config(self.base, self.claims, self.lake, engine=engine)

    def _derived(self) -> list[tuple[str, int, str]]:
        """(key in hex, process id, purpose) of every key derived so far."""
        if not self.digests.exists():
            return []
        lines = self.digests.read_text(encoding="utf-8").splitlines()
        return [(key, int(pid), purpose) for key, pid, purpose in (line.split(" ", 2) for line in lines if line)]

    def needles(self) -> Needles:
        needles = Needles()
        needles.add(self.secret, "the release secret")
        for key, _, purpose in self._derived():
            needles.add(bytes.fromhex(key), f"a key derived from the secret ({purpose})")
        return needles

    def derived_keys(self) -> dict[str, tuple[int, set[int]]]:
        """Per purpose, the number of distinct keys derived and the processes that derived them."""
        derived = self._derived()
        return {purpose: (len({key for key, _, used in derived if used == purpose}),
                          {pid for _, pid, used in derived if used == purpose})
                for purpose in {purpose for _, _, purpose in derived}}

    def scan(self, system_tmp_since: float | None = None) -> list[str]:
        needles = self.needles()
        found = needles.scan([self.tmp, self.spark_local, self.lake])
        if system_tmp_since is not None:
            found += needles.scan([Path(tempfile.gettempdir())], exclude=[self.private, self.base],
                                  newer_than=system_tmp_since)
        return found

    def local_files(self) -> list[Path]:
        return files_under([self.spark_local])

    def run(self, config: Path, kill: bool = False, leaky_sides: bool = False) -> Observed:
        environment = {
            **os.environ,
            "TMPDIR": str(self.tmp),
            "PYTHONPATH": os.pathsep.join([str(self.private), str(PROJECT_ROOT)]),
            "PRIVLAKE_TEST_SECRET": self.secret.hex(),
            "PRIVLAKE_SPARK_LOG": str(self.tmp / "spark.log"),
            "PRIVLAKE_SCAN_DIGESTS": str(self.digests),
            "PRIVLAKE_SCAN_CHECKPOINT": str(self.checkpoint),
            "PRIVLAKE_SCAN_GRAPHS": str(self.graphs),
            "PRIVLAKE_SCAN_ENGINE": self.engine,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
        environment.pop("SPARK_LOCAL_DIRS", None)
        if leaky_sides:
            environment["PRIVLAKE_SCAN_LEAKY_SIDES"] = "1"
        started = time.time()
        with open(self.private / "stdout", "wb") as out, open(self.private / "stderr", "wb") as err:
            child = subprocess.Popen(
                [sys.executable, str(self.private / "driver.py"), "run", str(config)],
                cwd=self.base, env=environment, stdout=out, stderr=err, start_new_session=True,
            )
            try:
                during = self._watch(child)
                local_at_pause = self.local_files()
                during += self.scan()
                if kill:
                    kill_session(child.pid)
                    child.wait(timeout=60)
                    returncode = None
                else:
                    (self.private / "resume").touch()
                    returncode = child.wait(timeout=RUN_TIMEOUT_SECONDS)
            finally:
                if child.poll() is None:
                    kill_session(child.pid)
                    child.wait(timeout=60)
        after = self.scan(system_tmp_since=started)
        graphs = self.graphs.read_bytes() if self.graphs.exists() else b""
        return Observed(sorted(set(during)), after, local_at_pause, self.local_files(), self.derived_keys(),
                        returncode, child.pid, graphs)

    def _watch(self, child: subprocess.Popen) -> list[str]:
        """Poll the folders until the child pauses before closing its engine (or exits)."""
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
        found: list[str] = []
        while not self.checkpoint.exists():
            if child.poll() is not None:
                raise AssertionError(f"the release exited with {child.returncode} before its engine closed:\n"
                                     + (self.private / "stderr").read_text()[-3000:])
            if time.monotonic() > deadline:
                raise AssertionError("the release did not reach the end of its jobs in time")
            found += self.scan()
            time.sleep(0.2)
        return found

    def stderr(self) -> str:
        return (self.private / "stderr").read_text()


def kill_session(session: int) -> None:
    """SIGKILL every process of the child's session (the driver, its JVM, PySpark's daemon and
    workers, which put themselves in a process group of their own)."""
    for process in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = process.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:
            try:
                os.kill(int(process.parent.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def claims(tmp_path: Path) -> Path:
    from tests.e2e.conftest import small_claims

    path = tmp_path / "claims.csv"
    small_claims(objects=30, claims_per_object=6).to_csv(path, index=False)
    return path


def test_the_scan_finds_every_encoding_of_the_secret_and_of_derived_keys(tmp_path: Path) -> None:
    secret, derived = secrets.token_bytes(32), secrets.token_bytes(32)
    needles = Needles()
    needles.add(secret, "the release secret")
    needles.add(derived, "a key derived from the secret")
    planted = {
        "raw.bin": b"x" * 9 + secret + b"y",
        "hex.txt": b"key=" + secret.hex().upper().encode(),
        "b64.txt": base64.b64encode(b"ab" + secret + b"cd"),
        "urlsafe.txt": base64.urlsafe_b64encode(b"z" + derived[16:] + b"tail"),
        "derived.gz": gzip.compress(b"header" + derived[:16]),
        "nothing.bin": secrets.token_bytes(4096),
    }
    for name, content in planted.items():
        (tmp_path / name).write_bytes(content)
    found = needles.scan([tmp_path])
    for name in ("raw.bin", "hex.txt", "b64.txt"):
        assert any(line.startswith(f"{tmp_path / name}: the release secret") for line in found), (name, found)
    assert any(line.startswith(f"{tmp_path / 'urlsafe.txt'}: a key derived") for line in found), found
    assert any(line.startswith(f"{tmp_path / 'derived.gz'}: a key derived") for line in found), found
    assert not any("nothing.bin" in line for line in found)


@pytest.mark.spark
def test_no_secret_on_disk_during_and_after_a_spark_release(tmp_path: Path, claims: Path) -> None:
    run = ScannedRun(tmp_path / "run", claims, "spark")
    observed = run.run(run.config())
    assert observed.returncode == 0, run.stderr()
    observed.assert_keys_recorded(on_workers=True)
    assert any("pyspark-" in str(path) for path in observed.local_files_at_pause), (
        "Spark's local dir held no broadcast file at the pause: the scan did not look where the leak was"
    )
    assert observed.during == [], observed.during
    assert observed.after == [], observed.after


@pytest.mark.spark
def test_no_secret_on_disk_after_a_spark_release_killed_mid_run(tmp_path: Path, claims: Path) -> None:
    run = ScannedRun(tmp_path / "run", claims, "spark")
    observed = run.run(run.config(), kill=True)
    assert observed.returncode is None
    observed.assert_keys_recorded(on_workers=True)
    assert any("pyspark-" in str(path) for path in observed.local_files_after), (
        "the killed run left no broadcast file behind: the crash was not the one the issue describes"
    )
    assert observed.during == [], observed.during
    assert observed.after == [], observed.after


@pytest.mark.spark
def test_negative_control_unencrypted_broadcast_of_the_secret_is_found(tmp_path: Path, claims: Path) -> None:
    """Before the fix: io encryption off and the side value (secret included) broadcast whole.
    PySpark writes the broadcast to Spark's local dir, where the killed run leaves it."""
    run = ScannedRun(tmp_path / "run", claims, "spark")
    unprotected = {"spark.io.encryption.enabled": "false", "spark.network.crypto.enabled": "false",
                   "spark.authenticate": "false"}
    observed = run.run(run.config(unprotected), kill=True, leaky_sides=True)
    assert any(str(run.spark_local) in line and "the release secret" in line for line in observed.during), (
        observed.during
    )
    assert any(str(run.spark_local) in line and "the release secret" in line for line in observed.after), (
        observed.after
    )


@pytest.mark.beam
def test_no_secret_on_disk_or_in_the_pipeline_graph_of_a_beam_release(tmp_path: Path, claims: Path) -> None:
    run = ScannedRun(tmp_path / "run", claims, "beam")
    observed = run.run(run.config())
    assert observed.returncode == 0, run.stderr()
    observed.assert_keys_recorded(on_workers=False)
    assert observed.during == [], observed.during
    assert observed.after == [], observed.after
    assert len(observed.graphs) > 10_000, "no pipeline graph was recorded"
    assert run.needles().find_in(observed.graphs) == [], "the secret is part of a Beam pipeline graph"


@pytest.mark.beam
def test_no_secret_on_disk_after_a_beam_release_killed_mid_run(tmp_path: Path, claims: Path) -> None:
    run = ScannedRun(tmp_path / "run", claims, "beam")
    observed = run.run(run.config(), kill=True)
    assert observed.returncode is None
    assert observed.during == [], observed.during
    assert observed.after == [], observed.after
