"""Airflow's REST API as the person running fleetctl: their own identity, never a shared account.

Where: FLEET_AIRFLOW_URL, else Airflow's [api] base_url (AIRFLOW__API__BASE_URL), else
http://127.0.0.1:<FLEET_AIRFLOW_PORT, default 8080>.
Who: AIRFLOW_API_TOKEN (a JWT the user got from /auth/token or the UI), else FLEET_AIRFLOW_USER
with FLEET_AIRFLOW_PASSWORD (or asked on the terminal). A password is never taken from the command
line (it would show in the process list) and never printed.

Airflow then records that user as the one who triggered a run, which is the requester the approval
gate sees: they may not approve what they ask for.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from fleetkit.core.errors import FleetError

TIMEOUT_S = 30.0


class AirflowUnreachable(FleetError):
    """The api-server did not answer (refused, timed out)."""


def base_url() -> str:
    url = os.environ.get("FLEET_AIRFLOW_URL") or os.environ.get("AIRFLOW__API__BASE_URL")
    if url:
        return url.rstrip("/")
    return f"http://127.0.0.1:{os.environ.get('FLEET_AIRFLOW_PORT') or 8080}"


def _request(method: str, url: str, body: dict | None, token: str | None) -> dict:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, method=method, headers=headers,
                                 data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            raw = r.read()
            return json.loads(raw) if raw else {}
    except urllib.error.HTTPError as e:
        detail = e.read()[:500].decode("utf-8", "replace")
        path = urllib.parse.urlsplit(url).path
        if e.code in (401, 403):
            raise FleetError(f"Airflow at {base_url()} refused {method} {path}: HTTP {e.code} (check the user and "
                             f"its permissions) {detail}") from None
        raise FleetError(f"Airflow at {base_url()}: {method} {path} answered HTTP {e.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise AirflowUnreachable(f"Airflow's API at {base_url()} did not answer ({reason}); set FLEET_AIRFLOW_URL "
                                 "to its base URL") from None


@dataclass
class Session:
    """A user's session with the api-server: `user` (who Airflow will record) and their token."""

    user: str
    token: str

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        return _request(method, f"{base_url()}{path}", body, self.token)

    def run_state(self, dag_id: str, run_id: str) -> str:
        """The state of a DAG run ('queued', 'running', 'success', 'failed'; 'no such run')."""
        try:
            return self.api("GET", f"/api/v2/dags/{_q(dag_id)}/dagRuns/{_q(run_id)}")["state"]
        except FleetError as e:
            if "HTTP 404" in str(e):
                return "no such run"
            raise


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _token_user(token: str) -> str | None:
    """The user a JWT names (its payload, unverified: only to say who acts; Airflow verifies it)."""
    import base64

    try:
        payload = token.split(".")[1]
        doc = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return None
    return doc.get("name") or doc.get("username") or doc.get("sub")


_SESSIONS: dict[tuple, Session] = {}


def login(prompt: bool = True) -> Session:
    """The caller's session: AIRFLOW_API_TOKEN, else FLEET_AIRFLOW_USER + FLEET_AIRFLOW_PASSWORD (the
    password asked on the terminal when not set and `prompt`). FleetError naming what to set. One
    login per process and Airflow (a command that asks twice asks for the password once)."""
    key = (base_url(), os.environ.get("AIRFLOW_API_TOKEN"), os.environ.get("FLEET_AIRFLOW_USER"))
    if key not in _SESSIONS:
        _SESSIONS[key] = _login(prompt)
    return _SESSIONS[key]


def _login(prompt: bool) -> Session:
    token = os.environ.get("AIRFLOW_API_TOKEN")
    if token:
        # who the token names (Airflow issued and signs it), never FLEET_AIRFLOW_USER beside it
        return Session(_token_user(token) or "unknown", token)
    user = os.environ.get("FLEET_AIRFLOW_USER")
    if not user:
        raise FleetError("this command acts in Airflow as you: set FLEET_AIRFLOW_USER to your Airflow user name "
                         "(and FLEET_AIRFLOW_PASSWORD, or answer the prompt), or AIRFLOW_API_TOKEN to a token of yours")
    password = os.environ.get("FLEET_AIRFLOW_PASSWORD")
    if password is None:
        if not (prompt and sys.stdin.isatty()):
            raise FleetError(f"no password for Airflow user {user!r}: set FLEET_AIRFLOW_PASSWORD or run in a terminal")
        import getpass

        password = getpass.getpass(f"Airflow password of {user}: ")
    doc = _request("POST", f"{base_url()}/auth/token", {"username": user, "password": password}, None)
    if not doc.get("access_token"):
        raise FleetError(f"Airflow at {base_url()} gave no token to {user!r}")
    return Session(user, doc["access_token"])


def run_state_or_none(dag_id: str, run_id: str, prompt: bool = True) -> tuple[str | None, str]:
    """(state, why) of a run as the caller sees it; (None, why not) when Airflow cannot be asked."""
    try:
        return login(prompt=prompt).run_state(dag_id, run_id), ""
    except FleetError as e:
        return None, str(e)


def verified_user(prompt: bool = True) -> tuple[str | None, str]:
    """(the caller's Airflow user as the api-server verified it, "") or (None, why not): a token the
    api-server accepts on an authenticated route names its user; a user and password it issued a
    token for are that user. Never a name taken from the environment on its own."""
    try:
        session = login(prompt=prompt)
        session.api("GET", "/api/v2/dags?limit=1")  # the api-server checks the token here
    except FleetError as e:
        return None, str(e)
    return session.user, ""
