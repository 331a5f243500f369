"""The OSV service client against a stand-in server.

A STAND-IN, and why: the OSV service (api.osv.dev) cannot run here, and this machine cannot reach it (its
name does not resolve through this sandbox's proxy). The stand-in is a real HTTP server on localhost that
speaks the service's batch API (https://google.github.io/osv.dev/api/: POST /v1/querybatch answering
{"results": [{"vulns": [{"id", "modified"}], "next_page_token"?}]}, GET /v1/vulns/ID answering the record)
and serves the synthetic records of tests/audit/osv_records.py (stand-ins written by our tests: real advisory
records may not be committed here). The ids it answers for a package version are those whose record
enumerates that version (`affected[].versions`, the list the service itself matches PyPI versions by), plus
records without such a list by alias; they are not responses recorded from osv.dev. What is tested is our
client: batching, pagination, retries, bounds, typed errors, withdrawn records dropped.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from audit import osv_records as osv

from envbuilder.audit import database
from envbuilder.audit.database import OfflineDatabase, OsvService
from envbuilder.audit.pipeline import AuditOptions, run_audit
from envbuilder.audit.severity import Threshold
from envbuilder.errors import AuditDatabaseError, InputTooLargeError, NetworkError

REPO = Path(__file__).resolve().parents[2]
# the v2.3.0 lock as committed before its security overrides (main at 1b77323: urllib3 1.26.20, cryptography
# 42.0.8); locks/v2.3.0 now takes the fixed releases, tests/lock/test_lock_security.py
LOCK = REPO / "tests" / "audit" / "data" / "lock-v2.3.0"


@dataclass
class Behaviour:
    records: dict[str, dict[str, Any]]
    page_size: int = 1000  # ids per page before a next_page_token
    fail_first: int = 0  # answer 503 to this many requests first
    status: int = 200  # answer every request with this status instead
    body: bytes | None = None  # answer every request with these bytes instead
    wrong_id: bool = False
    extra: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (name, version) -> more ids
    requests: list[str] = field(default_factory=list)

    def ids_for(self, name: str, version: str) -> list[str]:
        out = []
        for vid, rec in self.records.items():
            for aff in rec.get("affected") or []:
                pkg = aff.get("package") or {}
                if pkg.get("name") == name and version in (aff.get("versions") or []):
                    out.append(vid)
        # GitHub-style records carry no versions list: answer them through the record of the same package
        # that lists the version and names them as an alias
        for vid, rec in self.records.items():
            affected = rec.get("affected") or []
            names = {(a.get("package") or {}).get("name") for a in affected}
            listless = not any(a.get("versions") for a in affected)
            if listless and name in names and any(vid in self.records[o].get("aliases", []) for o in out):
                out.append(vid)
        return sorted({*out, *self.extra.get((name, version), [])})


def _handler(b: Behaviour) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, payload: Any) -> None:
            raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _fault(self) -> bool:
            b.requests.append(f"{self.command} {self.path}")
            if b.fail_first > 0:
                b.fail_first -= 1
                self._send(503, {"error": "unavailable"})
                return True
            if b.status != 200 or b.body is not None:
                self._send(b.status, b.body if b.body is not None else {"code": 3, "message": "bad request"})
                return True
            return False

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self._fault():
                return
            assert self.path == "/v1/querybatch", self.path
            results = []
            for q in body["queries"]:
                assert q["package"]["ecosystem"] == "PyPI"
                ids = b.ids_for(q["package"]["name"], q["version"])
                start = int(q.get("page_token") or 0)
                page = ids[start:start + b.page_size]
                res: dict[str, Any] = {"vulns": [{"id": i, "modified": b.records[i]["modified"]} for i in page]}
                if start + b.page_size < len(ids):
                    res["next_page_token"] = str(start + b.page_size)
                results.append(res if page else {})
            self._send(200, {"results": results})

        def do_GET(self) -> None:
            if self._fault():
                return
            vid = self.path.removeprefix("/v1/vulns/")
            if vid not in b.records:
                self._send(404, {"code": 5, "message": "Bug not found."})
                return
            rec = dict(b.records[vid])
            if b.wrong_id:
                rec["id"] = "EBTEST-0000-0"
            self._send(200, rec)

    return Handler


@pytest.fixture
def records() -> dict[str, dict[str, Any]]:
    return osv.records()


@pytest.fixture
def standin(records: dict[str, dict[str, Any]]) -> Iterator[tuple[str, Behaviour]]:
    b = Behaviour(records)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(b))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", b
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _audit(url: str, **kw: Any) -> Any:
    src = OsvService(url, backoff_s=0.0, **kw)
    return run_audit(AuditOptions(LOCK, src, Threshold.parse("low")))


def _groups(report: Any) -> set[tuple[str, str, str, tuple[str, ...]]]:
    """(package, version, the group's smallest synthetic id, fixed) of every finding."""
    return {(f.package, f.version, min(n for n in f.names() if n.startswith("EBTEST-")), f.fixed)
            for f in report.findings}


def test_online_audit_of_a_committed_lock(standin: tuple[str, Behaviour], osv_db: Path) -> None:
    url, b = standin
    online = _audit(url)
    assert online.database == {"kind": "osv-service", "url": url}
    urllib3 = [f for f in online.findings if f.package == "urllib3" and "CVE-0000-0001" in f.aliases]
    assert len(urllib3) == 1  # the GitHub-style and the PyPA-style record of one CVE: one finding
    f = urllib3[0]
    assert (f.id, f.version, f.fixed, f.severity.level, f.severity.score) == (
        osv.URLLIB3_GH, osv.LOCKED["urllib3"], ("2.6.3",), "high", osv.V_HIGH_7_5[1])
    assert f.aliases == ("CVE-0000-0001", osv.URLLIB3_PYPA)
    assert not online.problems
    # one batch for all 395 package versions, then one GET per advisory id
    assert sum(r.startswith("POST /v1/querybatch") for r in b.requests) == 1
    assert all(r.startswith("GET /v1/vulns/") for r in b.requests[1:])
    # the withdrawn record lists the locked jinja2: the service names it, the client fetches it and drops it
    assert f"GET /v1/vulns/{osv.JINJA2_WITHDRAWN}" in b.requests
    assert "jinja2" not in {f.package for f in online.findings}
    # the service's answer (by versions lists) and the offline match (by ranges) agree on the same records
    offline = run_audit(AuditOptions(LOCK, OfflineDatabase.open(osv_db), Threshold.parse("low")))
    assert _groups(online) == _groups(offline)
    assert {(f.id, f.package, f.fixed) for f in online.findings} == {
        (e.id, e.package, e.fixed) for e in osv.LOCK_FINDINGS}


def test_an_answer_the_ranges_do_not_support_is_reported_with_a_problem(standin: tuple[str, Behaviour]) -> None:
    url, b = standin
    # the GitHub-style record names "pytorch", not "torch": a service answering it for torch is not backed by it
    b.extra[("torch", osv.LOCKED["torch"])] = [osv.PYTORCH_GH]
    report = _audit(url)
    f = next(f for f in report.findings if osv.PYTORCH_GH in f.names())
    assert f.package == "torch" and {osv.PYTORCH_GH, osv.TORCH_PYPA} <= f.names()  # merged with the torch record
    assert any(osv.PYTORCH_GH in p and "reported as the service says" in p for p in report.problems)


def test_pagination_is_followed(standin: tuple[str, Behaviour]) -> None:
    url, b = standin
    b.page_size = 1
    paged = _audit(url)
    assert sum(r.startswith("POST") for r in b.requests) > 2
    b.page_size, b.requests = 1000, []
    assert _groups(_audit(url)) == _groups(paged) and len(_groups(paged)) == len(osv.LOCK_FINDINGS)


def test_retries_on_503_then_succeeds(standin: tuple[str, Behaviour]) -> None:
    url, b = standin
    b.fail_first = 2
    assert _audit(url).findings
    assert b.requests[:3] == ["POST /v1/querybatch"] * 3


def test_a_service_that_stays_down_is_a_network_error(standin: tuple[str, Behaviour]) -> None:
    url, b = standin
    b.status = 503
    with pytest.raises(NetworkError) as exc:
        _audit(url)
    assert exc.value.exit_code == 15 and "HTTP 503" in exc.value.cause and "--db" in str(exc.value.fix)


def test_nothing_listening_is_a_network_error() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(NetworkError, match="cannot be reached"):
            _audit(f"http://127.0.0.1:{port}")


@pytest.mark.parametrize(("status", "body", "cause"), [
    (400, None, "HTTP 400"),
    (200, b"<html>proxy login</html>", "not valid JSON"),
    (200, b'{"results": []}', "with 0 results"),
    (200, b'{"results": [{"vulns": [{"id": 7}]}]}', "with 1 results"),
])
def test_bad_answers_are_typed_errors(standin: tuple[str, Behaviour], status: int, body: bytes | None,
                                      cause: str) -> None:
    url, b = standin
    b.status, b.body = status, body
    with pytest.raises(AuditDatabaseError) as exc:
        _audit(url)
    assert cause in exc.value.cause and exc.value.exit_code == 99


def test_a_record_under_another_id_is_refused(standin: tuple[str, Behaviour]) -> None:
    url, b = standin
    b.wrong_id = True
    with pytest.raises(AuditDatabaseError, match="answered with record EBTEST-0000-0"):
        _audit(url)


def test_an_oversized_answer_is_refused(standin: tuple[str, Behaviour], monkeypatch: pytest.MonkeyPatch) -> None:
    url, _b = standin
    monkeypatch.setattr(database, "MAX_RESPONSE_BYTES", 64)
    with pytest.raises(InputTooLargeError, match="larger than"):
        _audit(url)
