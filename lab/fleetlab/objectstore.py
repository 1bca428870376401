"""The lab's object store: a real S3-compatible server (s3proxy) for a data root `s3://<bucket>/<prefix>`.

s3proxy (org.gaul:s3proxy, its jar-with-dependencies from Maven Central; version and sha256 in
fleetlab/dists.py and fleetlab/kafka-jars.sha256, fetched like the Kafka jars) serves the jclouds
"filesystem" backend: every bucket a folder under `<home>/blobs`. It checks AWS Signature V4 with
an identity and secret generated at the first start and kept in `<home>/s3proxy.properties`
(mode 0600; s3proxy reads its settings from that file, so the secret is never on a command line).
It binds 127.0.0.1 (or the address of a lab host, run inside that host's network namespace) on the
port plan's port (fleetlab.ports.PortPlan.object_store), with a small heap, and is started and
stopped by PID like every other lab process.

    spec = ObjectStoreSpec(home, port)
    up(spec); create_bucket(spec, "fleet")
    spec.connection_uri()   # the Airflow connection (type aws) a deployment names in FLEET_DATA_ROOT_CONN_ID
    down(spec)
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from fleetkit.core.errors import FleetError
from fleetlab import dists, procs

#: the JVM's heap: the lab's object store holds a few MB of reports and datasets
HEAP = "-Xmx192m"
REGION = "us-east-1"


class ObjectStoreError(FleetError):
    pass


@dataclass(frozen=True)
class ObjectStoreSpec:
    home: Path
    port: int
    host: str = "127.0.0.1"
    #: the lab host's network namespace to run in (its address is `host`), or None: this machine's loopback
    netns: str | None = None

    @property
    def properties_file(self) -> Path:
        return self.home / "s3proxy.properties"

    @property
    def credentials_file(self) -> Path:
        return self.home / "credentials.json"

    @property
    def blobs(self) -> Path:
        return self.home / "blobs"

    @property
    def pid_file(self) -> Path:
        return self.home / "s3proxy.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "s3proxy.log"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def credentials(self) -> tuple[str, str]:
        """(access key id, secret access key), generated at the first start."""
        try:
            doc = json.loads(self.credentials_file.read_text())
            return doc["access_key_id"], doc["secret_access_key"]
        except (OSError, ValueError, KeyError):
            raise ObjectStoreError(f"the object store of {self.home} has no credentials yet: start it first "
                                   "(fleetlab objectstore up)") from None

    def connection(self) -> dict:
        """The Airflow connection (type aws, as the Amazon provider names its fields) of this store."""
        key, secret = self.credentials()
        return {"conn_type": "aws", "login": key, "password": secret,
                "extra": {"endpoint_url": self.endpoint, "region_name": REGION}}

    def connection_uri(self) -> str:
        """The connection as JSON, the form AIRFLOW_CONN_<ID> takes."""
        return json.dumps(self.connection())


def _write_private(path: Path, text: str) -> None:
    from fleetlab.tls import _write_private as write_bytes  # the lab's one 0600 writer

    write_bytes(path, text.encode())


def _ensure_credentials(spec: ObjectStoreSpec) -> tuple[str, str]:
    if spec.credentials_file.exists():
        return spec.credentials()
    key = "FLEETLAB" + secrets.token_hex(6).upper()
    secret = secrets.token_urlsafe(30)
    _write_private(spec.credentials_file, json.dumps({"access_key_id": key, "secret_access_key": secret}))
    return key, secret


def properties_text(spec: ObjectStoreSpec, key: str, secret: str) -> str:
    """s3proxy's whole configuration (it holds the secret: written mode 0600)."""
    return "\n".join([
        "# written by fleetlab.objectstore: the lab's S3-compatible object store",
        f"s3proxy.endpoint=http://{spec.host}:{spec.port}",
        "s3proxy.authorization=aws-v4",
        f"s3proxy.identity={key}",
        f"s3proxy.credential={secret}",
        "jclouds.provider=filesystem",
        f"jclouds.filesystem.basedir={spec.blobs}",
        "",
    ])


def _marker(spec: ObjectStoreSpec) -> str:
    return str(spec.properties_file)


def running(spec: ObjectStoreSpec) -> int | None:
    return procs.owned_pid(spec.pid_file, _marker(spec))


def jar() -> Path:
    return dists.ensure_s3proxy()


def up(spec: ObjectStoreSpec, timeout: float = 60) -> int:
    """Start the server (unless ours already runs) and wait until it answers. Returns its PID."""
    pid = running(spec)
    if pid is None:
        if procs.port_open(spec.host, spec.port):
            raise ObjectStoreError(f"port {spec.host}:{spec.port} is taken by another process: the object store "
                                   f"of {spec.home} cannot start there")
        path = jar()
        java = shutil.which("java")
        if java is None:
            raise ObjectStoreError("java is not installed (s3proxy runs on Java 17): run `make setup`")
        spec.blobs.mkdir(parents=True, exist_ok=True)
        key, secret = _ensure_credentials(spec)
        _write_private(spec.properties_file, properties_text(spec, key, secret))
        argv = [java, HEAP, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-jar", str(path),
                "--properties", str(spec.properties_file)]
        pid = procs.start(argv, spec.pid_file, spec.log_file, cwd=str(spec.home), netns=spec.netns,
                          env={k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "JAVA_HOME")})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running(spec) is None:
            raise ObjectStoreError(f"s3proxy of {spec.home} exited during start-up; last lines of "
                                   f"{spec.log_file}:\n{_tail(spec.log_file)}")
        if answers(spec):
            return pid
        time.sleep(0.3)
    raise ObjectStoreError(f"s3proxy on {spec.endpoint} did not answer in {timeout:.0f}s; log: {spec.log_file}")


def answers(spec: ObjectStoreSpec) -> bool:
    """Whether the server answers HTTP (any status: an unsigned request is refused, which is an answer)."""
    import urllib.request
    import urllib.error

    try:
        urllib.request.urlopen(spec.endpoint + "/", timeout=1)
        return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def create_bucket(spec: ObjectStoreSpec, bucket: str) -> None:
    """Create a bucket (a folder of the filesystem backend; as good as a CreateBucket request, and it
    needs no client here)."""
    if not bucket or "/" in bucket or bucket in (".", "..") or bucket != urllib.parse.quote(bucket, safe="-._"):
        raise ObjectStoreError(f"not a bucket name: {bucket!r}")
    (spec.blobs / bucket).mkdir(parents=True, exist_ok=True)


def down(spec: ObjectStoreSpec, timeout: float = 15) -> str:
    """SIGTERM, SIGKILL after `timeout`."""
    return procs.stop(spec.pid_file, _marker(spec), timeout=timeout, sig=signal.SIGTERM)


def remove(spec: ObjectStoreSpec) -> None:
    """Stop the server and remove its folder (credentials, blobs, log)."""
    down(spec)
    shutil.rmtree(spec.home, ignore_errors=True)


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"
