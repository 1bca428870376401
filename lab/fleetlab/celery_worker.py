"""What a lab Celery worker of the cluster profile runs besides `airflow celery worker`.

* hostname(): Airflow's [core] hostname_callable in the workers. On one machine every worker has
  the same host name, so each reports its Celery node name (FLEET_CELERY_HOSTNAME, the
  --celery-hostname it was started with) as the task instance's hostname: the UI and the tests
  tell which worker ran a task. On a real deployment each worker is its own host and the default
  (the host's FQDN) is right.
* `python -m fleetlab.celery_worker --port N`: the worker's log server (Airflow's own app) bound
  to 127.0.0.1 (on the several-hosts lab, the worker host's own address). `airflow celery worker` would start one on every interface; the lab starts its
  workers with --skip-serve-logs and runs this instead.
"""

from __future__ import annotations

import argparse
import os
import socket


def hostname() -> str:
    return os.environ.get("FLEET_CELERY_HOSTNAME") or socket.getfqdn()


def serve_logs(port: int, host: str = "127.0.0.1") -> None:
    import uvicorn

    uvicorn.run("airflow.utils.serve_logs.log_server:get_app", factory=True, host=host, port=port,
                log_config=None, access_log=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fleetlab.celery_worker",
                                 description="serve a Celery worker's task logs on one address")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1", help="the address to bind (the worker's lab host's own)")
    args = ap.parse_args(argv)
    serve_logs(args.port, args.host)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
