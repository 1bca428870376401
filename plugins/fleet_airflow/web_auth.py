"""Authentication and permission checks of the toolkit's pages under the api-server (the reports
and the fleet page): the api-server's own login (a Bearer token, or the UI's `_token` cookie when
the page is opened from the Airflow UI) and its auth manager's DAG read check.

401 without or with an invalid token, 403 without the permission.
"""

from __future__ import annotations

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

bearer = HTTPBearer(auto_error=False)


async def reader(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)):
    """The user of the api-server's session: Bearer token first, else the `_token` cookie, verified
    by the api-server's own resolver (the same one its REST API uses, on every supported Airflow)."""
    from airflow.api_fastapi.core_api.security import resolve_user_from_token

    token = credentials.credentials if credentials and credentials.scheme.lower() == "bearer" else None
    try:
        return await resolve_user_from_token(token or request.cookies.get("_token"))
    except HTTPException as e:
        # Airflow answers 403 to a token it cannot verify; here that is "not logged in"
        if e.status_code in (status.HTTP_401_UNAUTHORIZED, status.HTTP_403_FORBIDDEN):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, f"Not authenticated: {e.detail}",
                                headers={"WWW-Authenticate": "Bearer"}) from None
        raise


def require_dag_read(user, dag_id: str | None) -> None:
    """The auth manager's DAG read check on `dag_id` (None: all DAGs). Sync: the team look-up hits
    the database, so callers run it in a worker thread (a sync dependency or handler)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
    from airflow.models.dag import DagModel

    team = DagModel.get_team_name(dag_id) if dag_id else None
    if not get_auth_manager().is_authorized_dag(method="GET", details=DagDetails(id=dag_id, team_name=team), user=user):
        raise HTTPException(status.HTTP_403_FORBIDDEN,
                            f"Forbidden: this page needs read access to {'DAG ' + repr(dag_id) if dag_id else 'all DAGs'}")


def token_of(request: Request) -> str | None:
    """The caller's own token (to call the REST API as them): the Bearer header, else the cookie."""
    auth = request.headers.get("authorization") or ""
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.cookies.get("_token")


#: what every page of the toolkit answers with: only the Airflow UI itself (same origin) may show it
#: in a frame (the fleet page is an external view of the UI); another site framing a prefilled
#: runbook form could trick a logged-in user into clicking it
FRAMING_HEADERS = {"Content-Security-Policy": "frame-ancestors 'self'", "X-Frame-Options": "SAMEORIGIN"}


def add_framing_headers(app) -> None:
    """Every response of `app` carries FRAMING_HEADERS (a middleware: errors and static files too)."""

    @app.middleware("http")
    async def no_framing_by_others(request: Request, call_next):
        response = await call_next(request)
        for name, value in FRAMING_HEADERS.items():
            response.headers.setdefault(name, value)
        return response
