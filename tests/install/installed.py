"""The toolkit as a team installs it: its wheel built from this checkout, installed into a fresh
virtualenv beside a released Airflow, and a deployment of it made in a folder outside the checkout,
with an environment that holds nothing of the checkout (no FLEET_HOME, no PYTHONPATH).

What the deployment gets is what docs/deploy.md tells a team to give it: the settings (FLEET_FILE,
FLEET_DATA_ROOT, the audit key), Airflow's own configuration (AIRFLOW_HOME, its database, the
secrets of its api-server), the clusters' connections, and the DAG files `fleetctl deploy dags`
writes. Its metadata database is a database of its own in the tests' PostgreSQL (the deployment's
choice of database; the driver is installed beside Airflow as a team would).

Supported Airflow versions, and how each is installed (pyproject.toml's ranges are what this tests):
  newest  the newest Airflow served, with every other dependency at the lab's pins (requirements.lock)
  oldest  the oldest supported Airflow, with every other direct dependency of the wheel at the lower
          bound pyproject.toml declares (uv's lowest-direct resolution)
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UV = REPO / ".venv" / "bin" / "uv"
PYTHON = Path(os.path.realpath(sys.executable))  # the interpreter the lab's venv was made from

#: key -> (the Airflow release, how the rest is resolved, the index of its api-server's port)
AIRFLOW = {
    "newest": ("3.3.2", "locked", 0),
    "oldest": ("3.1.8", "lowest-direct", 1),
}
#: the deployment's own database drivers (Airflow's metadata DB is PostgreSQL here: psycopg2 for its
#: sync engine, asyncpg for its async one), at the lab's versions
DB_DRIVERS = ["psycopg2-binary==2.9.13", "asyncpg==0.32.0"]
#: folders of the checkout whose paths must never reach what an installed deployment writes: its
#: code and its environment (the lab keeps its brokers' data under the checkout too, in .lab-test:
#: those are the clusters' files, which a collection names as the brokers report them)
CHECKOUT_CODE = [REPO / d for d in ("include", "plugins", "spark_jobs", "dags", ".venv", "lab", "fleetctl")]


def run(argv: list, *, env: dict | None = None, cwd: str | Path | None = None, timeout: float = 900,
        check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} -> {out.returncode}\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}")
    return out


def build(dest: Path) -> tuple[Path, Path]:
    """The wheel and the sdist of the checkout (uv build), into `dest`."""
    run([UV, "build", "--wheel", "--sdist", "-o", dest, REPO], cwd=dest.parent)
    (wheel,) = glob.glob(str(dest / "*.whl"))
    (sdist,) = glob.glob(str(dest / "*.tar.gz"))
    return Path(wheel), Path(sdist)


def requirements_of(wheel: Path) -> list[str]:
    """The wheel's own Requires-Dist (no extras), from its METADATA."""
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return [line.split(": ", 1)[1] for line in meta.splitlines()
            if line.startswith("Requires-Dist: ") and "extra ==" not in line]


def make_venv(folder: Path, wheel: Path, key: str) -> Path:
    """A virtualenv holding the wheel, the Airflow of `key` and the deployment's database driver."""
    version, resolution, _ = AIRFLOW[key]
    run([UV, "venv", "-q", "--python", PYTHON, folder])
    python = folder / "bin" / "python"
    reqs = folder / "requirements.txt"
    pinned = [r if not r.replace(" ", "").startswith("apache-airflow<") and not r.startswith("apache-airflow>")
              else f"apache-airflow=={version}" for r in requirements_of(wheel)]
    reqs.write_text("\n".join(pinned + DB_DRIVERS) + "\n")
    argv = [UV, "pip", "install", "-q", "--python", python, "-r", reqs]
    if resolution == "locked":
        argv += ["-c", REPO / "requirements.lock"]
    else:
        # pyspark (a dependency of the apache-spark provider, not of the toolkit's wheel) at the lab's
        # version: its newest release is an sdist of 400 MB that takes minutes to build
        pins = folder / "constraints.txt"
        pins.write_text("".join(line + "\n" for line in REPO.joinpath("requirements.lock").read_text().splitlines()
                                if line.startswith(("pyspark==", "pyspark-client=="))))
        argv += ["--resolution", resolution, "-c", pins]
    run(argv, timeout=1800)
    run([UV, "pip", "install", "-q", "--python", python, "--no-deps", wheel])
    return folder


@dataclass
class Deployment:
    """One deployment of the installed toolkit: a venv, a home outside the checkout, its environment."""

    key: str  # which supported Airflow (AIRFLOW)
    venv: Path
    home: Path  # AIRFLOW_HOME
    root: Path  # the folder holding everything of it (fleet file, data root, certificates)
    env: dict = field(default_factory=dict)
    port: int = 0
    api: subprocess.Popen | None = None
    passwords: dict = field(default_factory=dict)
    components: dict = field(default_factory=dict)

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def run(self, *argv, env: dict | None = None, timeout: float = 900, check: bool = True):
        """A command of the venv (`airflow`, `fleetctl`, `python`), from the deployment's folder."""
        exe = self.bin / argv[0]
        return run([exe, *argv[1:]], env=env if env is not None else self.env, cwd=self.root, timeout=timeout,
                   check=check)

    def python(self, code: str, env: dict | None = None, check: bool = True):
        return self.run("python", "-c", code, env=env, check=check)

    # -- the api-server --------------------------------------------------------------------------
    def start_api(self, env: dict | None = None, timeout: float = 240) -> None:
        log = open(self.home / "logs" / "api-server.out", "ab")
        self.api = subprocess.Popen([str(self.bin / "airflow"), "api-server", "--port", str(self.port)],
                                    stdout=log, stderr=subprocess.STDOUT, env=env or self.env, cwd=self.root,
                                    start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.api.poll() is not None:
                raise AssertionError(f"the api-server ended ({self.api.returncode}): "
                                     f"{(self.home / 'logs' / 'api-server.out').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1)
        raise AssertionError(f"the api-server did not answer in {timeout}s")

    def stop_api(self) -> None:
        _stop(self.api)

    # -- the scheduler and the triggerer (what a runbook needs to run for real) -------------------
    def start_scheduler(self) -> None:
        """The scheduler (LocalExecutor) and the triggerer, as the deployment runs them."""
        for name in ("scheduler", "triggerer"):
            argv = [str(self.bin / "airflow"), name] + (["--skip-serve-logs"] if name == "scheduler" else [])
            log = open(self.home / "logs" / f"{name}.out", "ab")
            self.components[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                                     cwd=self.root, start_new_session=True)

    def stop_components(self) -> None:
        for proc in self.components.values():
            _stop(proc)
        self.components.clear()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def token(self, user: str = "admin") -> str:
        req = urllib.request.Request(f"{self.url}/auth/token", method="POST",
                                     data=json.dumps({"username": user, "password": self.passwords[user]}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())["access_token"]

    def get(self, path: str, token: str | None, method: str = "GET", body: dict | None = None) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{path}", method=method, headers=headers, data=data)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace")


def _stop(proc: subprocess.Popen | None, grace: float = 20) -> None:
    """By PID: SIGTERM to its process group, then SIGKILL after `grace` seconds."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def copy_connection_files(conn_env: dict[str, str], folder: Path) -> dict[str, str]:
    """The clusters' AIRFLOW_CONN_* JSON with every file they name (TLS certificates and keys) copied
    into `folder`: the deployment owns its credentials' files."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for var, value in conn_env.items():
        doc = json.loads(value)
        for k, v in list((doc.get("extra") or {}).items()):
            if k.endswith(".location") and isinstance(v, str) and os.path.isfile(v):
                dest = folder / f"{var.lower()}-{Path(v).name}"
                shutil.copyfile(v, dest)
                os.chmod(dest, 0o600)
                doc["extra"][k] = str(dest)
        out[var] = json.dumps(doc)
    return out


def base_env(dep: Deployment, db_url: str, settings: dict[str, str]) -> dict[str, str]:
    """The deployment's whole environment, built from nothing (no variable of the test process)."""
    import secrets
    from base64 import urlsafe_b64encode

    return {
        "PATH": f"{dep.bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(dep.root),
        "LANG": "C.UTF-8",
        "AIRFLOW_HOME": str(dep.home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
        "AIRFLOW__DATABASE__LOAD_DEFAULT_CONNECTIONS": "False",
        "AIRFLOW__CORE__FERNET_KEY": urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(dep.port),
        "AIRFLOW__API__BASE_URL": dep.url,
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{dep.url}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,approver:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(dep.home / "passwords.json"),
        **settings,
    }


def files_naming(folders: list[Path], needles: list[Path]) -> list[str]:
    """Files under `folders` whose bytes hold one of the `needles` (as paths), with the needle."""
    found = []
    raw = [str(n).encode() for n in needles]
    for folder in folders:
        for p in folder.rglob("*"):
            if not p.is_file() or p.is_symlink():
                continue
            try:
                data = p.read_bytes()
            except OSError:
                continue
            for n in raw:
                if n in data:
                    found.append(f"{p}: {n.decode()}")
    return found
