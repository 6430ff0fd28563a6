"""The console's guard, through Starlette's test client: logins, CSRF, read-only, a dead cluster.

No broker runs: the gateway points at a closed port, so every page that
needs the cluster answers with the unreachable banner.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from headwater.console.app import ConsoleApp, ConsoleOptions
from headwater.console.auth import hash_password_scrypt
from headwater.console.gateway import ClusterGateway
from headwater.console.server import ConsoleConfigError, ConsoleServer, ConsoleSettings

CLOSED = "127.0.0.1:1"


def _client(options: ConsoleOptions) -> Iterator[TestClient]:
    gateway = ClusterGateway(CLOSED, request_timeout_s=2)
    try:
        with TestClient(ConsoleApp(gateway, options).app, follow_redirects=False) as client:
            yield client
    finally:
        gateway.close()


@pytest.fixture
def open_console() -> Iterator[TestClient]:
    yield from _client(ConsoleOptions())


@pytest.fixture
def read_only_console() -> Iterator[TestClient]:
    yield from _client(ConsoleOptions(read_only=True))


@pytest.fixture
def login_console() -> Iterator[TestClient]:
    users = {"ops": hash_password_scrypt("pw", log_n=10)}
    yield from _client(ConsoleOptions(users=users))


def _csrf(client: TestClient, path: str = "/") -> str:
    page = client.get(path).text
    found = re.search(r'data-csrf="([^"]+)"', page)
    assert found, page
    return found.group(1)


def test_an_unreachable_cluster_is_a_banner_that_keeps_retrying(open_console: TestClient) -> None:
    page = open_console.get("/")
    assert page.status_code == 503
    assert "Cluster unreachable." in page.text
    assert "127.0.0.1:1" in page.text
    assert 'hx-get="/_ping"' in page.text and "every 3s" in page.text
    retry = open_console.get("/_ping", headers={"HX-Request": "true"})
    assert retry.status_code == 200 and "Cluster unreachable." in retry.text


def test_a_write_without_the_csrf_token_is_refused(open_console: TestClient) -> None:
    _csrf(open_console)  # a session exists, but the form does not carry its token
    refused = open_console.post("/topics", data={"name": "x", "partitions": "1"})
    assert refused.status_code == 403
    assert "CSRF token is missing or stale" in refused.text
    wrong = open_console.post("/topics", data={"name": "x", "csrf": "forged"})
    assert wrong.status_code == 403


def test_read_only_refuses_a_write_even_with_a_valid_token(read_only_console: TestClient) -> None:
    token = _csrf(read_only_console)
    refused = read_only_console.post("/topics", data={"name": "x", "csrf": token})
    assert refused.status_code == 403
    assert "this console is read-only" in refused.text
    for path in ("/groups/g/delete", "/security/users", "/operations/elect", "/topics/t/produce"):
        assert read_only_console.post(path, data={"csrf": token}).status_code == 403


def test_with_a_user_file_every_page_needs_a_login(login_console: TestClient) -> None:
    page = login_console.get("/topics?q=a")
    assert page.status_code == 303
    assert page.headers["location"] == "/login?next=%2Ftopics%3Fq%3Da"
    token = _csrf(login_console, "/login")
    bad = login_console.post("/login", data={"username": "ops", "password": "nope", "csrf": token})
    assert bad.status_code == 401 and "wrong user name or password" in bad.text
    good = login_console.post(
        "/login?next=/topics", data={"username": "ops", "password": "pw", "csrf": token}
    )
    assert good.status_code == 303 and good.headers["location"] == "/topics"
    # Logged in: the page is served (here, the unreachable banner of the topics page).
    assert "Cluster unreachable." in login_console.get("/topics").text
    assert "ops" in login_console.get("/topics").text


def test_login_redirects_only_within_the_console(login_console: TestClient) -> None:
    token = _csrf(login_console, "/login")
    answer = login_console.post(
        "/login?next=//evil.example/", data={"username": "ops", "password": "pw", "csrf": token}
    )
    assert answer.headers["location"] == "/"


def test_the_login_gets_a_fresh_session_token(login_console: TestClient) -> None:
    before = _csrf(login_console, "/login")
    login_console.post("/login", data={"username": "ops", "password": "pw", "csrf": before})
    assert _csrf(login_console, "/topics") != before


def test_an_htmx_request_without_a_login_is_told_to_go_to_the_login(
    login_console: TestClient,
) -> None:
    answer = login_console.get("/fragment/overview", headers={"HX-Request": "true"})
    assert answer.status_code == 401 and answer.headers["HX-Redirect"] == "/login"


def test_a_console_off_loopback_refuses_to_start_without_users() -> None:
    with pytest.raises(ConsoleConfigError, match="not a loopback address"):
        ConsoleServer(ConsoleSettings(bootstrap=CLOSED, listen="0.0.0.0:0"))


def test_static_assets_ship_with_the_package(open_console: TestClient) -> None:
    for path in (
        "/static/vendor/htmx-2.0.11.min.js",
        "/static/vendor/uPlot-1.6.32.iife.min.js",
        "/static/console.js",
        "/static/console.css",
    ):
        assert open_console.get(path).status_code == 200, path
