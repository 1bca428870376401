"""Stand-ins for Slack and PagerDuty, on 127.0.0.1: nothing a test sends leaves the machine (and
only the package registries are reachable from it anyway).

* ``Receiver``: an HTTP server that records every request (method, path, headers, body) and
  answers as a Slack incoming webhook does (200 ``ok``). The Slack connection's password is
  ``receiver.url("/services/...")``: Slack's notifier posts to the URL in its connection. A path
  under ``/fail/`` answers 500 with a body quoting the path, as a misbehaving endpoint might (the
  toolkit must not log what it quotes: the path is the webhook's secret).
* ``PagerDutyProxy``: the PagerDuty provider's client posts to a fixed
  https://events.pagerduty.com/v2/enqueue (its hook passes no base URL, and the client refuses any
  URL but https). What stands in is an HTTPS proxy, as a deployment behind an egress proxy has:
  the client honours HTTPS_PROXY and SSL_CERT_FILE (the older requests-based client
  REQUESTS_CA_BUNDLE). The proxy accepts CONNECT to events.pagerduty.com:443 only, terminates TLS
  with a certificate for that name signed by a CA made here (``cryptography``), and answers the
  Events API v2 as PagerDuty does (202, the dedup key). Slack's SDK sends every request through
  HTTPS_PROXY when it is set (it ignores NO_PROXY), so the proxy also forwards plain-HTTP requests
  to 127.0.0.1 (the Receiver), and to nowhere else.

Both record what they receive in ``requests`` (a list of dicts: method, path, host, headers,
body, json, via). They bind 127.0.0.1 on a port the kernel picks, and ``stop()`` shuts them down.
"""

from __future__ import annotations

import http.client
import http.server
import json
import ssl
import threading
import urllib.parse
import uuid
from pathlib import Path

PAGERDUTY_HOST = "events.pagerduty.com"


def _record(handler: http.server.BaseHTTPRequestHandler, via: str, host: str, path: str) -> dict:
    length = int(handler.headers.get("Content-Length") or 0)
    body = handler.rfile.read(length) if length else b""
    try:
        doc = json.loads(body.decode("utf-8")) if body else None
    except ValueError:
        doc = None
    return {"method": handler.command, "host": host, "path": path, "headers": dict(handler.headers.items()),
            "body": body, "json": doc, "via": via}


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Base:
    handler: type

    def __init__(self):
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), self.handler)
        self.server.owner = self
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name=type(self).__name__)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def add(self, rec: dict) -> None:
        with self.lock:
            self.requests.append(rec)

    def start(self):
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class _ReceiverHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        owner: Receiver = self.server.owner
        rec = _record(self, self.headers.get("X-Forwarded-Via") or "direct", self.headers.get("Host", ""), self.path)
        owner.add(rec)
        if self.path.startswith("/fail/"):
            status, body = 500, f"no_service: the webhook {self.path} is gone".encode()
        else:
            status, body = 200, b"ok"
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Receiver(_Base):
    """Records the requests it gets; answers 200 ``ok`` (500 under /fail/)."""

    handler = _ReceiverHandler

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


# -- the HTTPS proxy standing in for PagerDuty ----------------------------------------------------
def make_ca_and_certificate(folder: Path, host: str = PAGERDUTY_HOST) -> tuple[Path, Path]:
    """(CA certificate, the host's key and certificate in one PEM): a CA made for the test, and a
    certificate for `host` it signs (the lab's own TLS helpers, fleetlab.tls)."""
    from fleetlab.tls import make_ca, make_server_cert

    ca_pem, ca_key = make_ca(folder, "kafka-fleet test CA (alert stand-ins)")
    return ca_pem, make_server_cert(folder, ca_pem, ca_key, hosts=(host,), name=host)


class _PagerDutyHandler(http.server.BaseHTTPRequestHandler):
    """The Events API v2 inside the TLS tunnel."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        proxy: PagerDutyProxy = self.server.owner
        rec = _record(self, "connect", PAGERDUTY_HOST, self.path)
        proxy.add(rec)
        doc = rec["json"] or {}
        if self.path != "/v2/enqueue" or not doc.get("routing_key"):
            status, body = 400, {"status": "invalid event", "message": "Event object is invalid"}
        else:
            status, body = 202, {"status": "success", "message": "Event processed",
                                 "dedup_key": doc.get("dedup_key") or uuid.uuid4().hex}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_CONNECT(self):
        proxy: PagerDutyProxy = self.server.owner
        host, _, port = self.path.partition(":")
        proxy.add({"method": "CONNECT", "host": self.path, "path": "", "headers": dict(self.headers.items()),
                   "body": b"", "json": None, "via": "proxy"})
        if host != PAGERDUTY_HOST or port != "443":
            self.send_response(403, "only events.pagerduty.com:443 here")
            self.send_header("Content-Length", "0")
            self.end_headers()
            self.close_connection = True
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        try:
            tls = proxy.tls.wrap_socket(self.connection, server_side=True)
        except (ssl.SSLError, OSError) as e:
            proxy.errors.append(f"TLS: {e}")
            self.close_connection = True
            return
        try:
            _PagerDutyHandler(tls, self.client_address, self.server)
        finally:
            try:
                tls.close()
            except OSError:
                pass
        self.close_connection = True

    def _forward(self):
        """An absolute-form request (slack_sdk sends every request through HTTPS_PROXY): forwarded to
        127.0.0.1 only."""
        url = urllib.parse.urlsplit(self.path)
        rec = _record(self, "proxy", url.netloc, url.path + (f"?{url.query}" if url.query else ""))
        self.server.owner.add(rec)
        if url.scheme != "http" or url.hostname not in ("127.0.0.1", "localhost"):
            self.send_response(403, "loopback only")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=10)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-connection", "connection")}
        headers["X-Forwarded-Via"] = "proxy"
        conn.request(self.command, rec["path"], body=rec["body"], headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.getheader("Content-Type") or "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = _forward
    do_GET = _forward


class PagerDutyProxy(_Base):
    """An HTTPS proxy on 127.0.0.1 that is PagerDuty's Events API for events.pagerduty.com (TLS
    terminated with a certificate its own CA signed) and forwards plain HTTP to 127.0.0.1 only."""

    handler = _ProxyHandler

    def __init__(self, folder: Path):
        super().__init__()
        self.ca_file, cert = make_ca_and_certificate(folder)
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(cert)
        self.errors: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What a process needs to reach PagerDuty through this proxy."""
        ca = str(self.ca_file)
        return {"HTTPS_PROXY": self.url, "https_proxy": self.url, "SSL_CERT_FILE": ca, "REQUESTS_CA_BUNDLE": ca,
                "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

    def events(self) -> list[dict]:
        """The Events API requests received (JSON bodies)."""
        with self.lock:
            return [r["json"] for r in self.requests if r["via"] == "connect" and r["path"] == "/v2/enqueue"]


