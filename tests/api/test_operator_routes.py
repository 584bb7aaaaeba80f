"""The operator routes (/dashboard, /metrics) are closed unless opened: a token as a Bearer header,
or, with none set, a loopback client that no proxy relayed. /metrics stays bounded whatever methods
and paths clients send."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import serve

OPERATOR_PATHS = ["/metrics", "/dashboard", "/dashboard/data.json"]


def samples(text: str) -> dict[tuple, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_made_up_methods_and_unserved_paths_are_counted_under_one_label_each(api_server):
    with httpx.Client(base_url=api_server.url, timeout=30) as http:
        for i in range(40):
            assert http.request(f"ZZMETHOD{i}", "/healthz").status_code == 405
            assert http.request(f"ZZMETHOD{i}", f"/nothing-here-{i}").status_code == 404
        for i in range(10):
            assert http.get(f"/nothing-here-{i}").status_code == 404
        text = http.get("/metrics").text
    assert "ZZMETHOD" not in text and "nothing-here" not in text
    counted = samples(text)
    requests = "synth_api_requests_total"
    assert counted[(requests, (("method", "other"), ("route", "/healthz"), ("status", "405")))] == 40
    assert counted[(requests, (("method", "other"), ("route", "unmatched"), ("status", "404")))] == 40
    assert counted[(requests, (("method", "GET"), ("route", "unmatched"), ("status", "404")))] == 10
    methods = {dict(labels)["method"] for name, labels in counted if name == requests}
    assert methods == {"GET", "other"}


@pytest.mark.parametrize("path", OPERATOR_PATHS)
def test_with_no_token_only_a_loopback_client_no_proxy_relayed_is_answered(api_server, path):
    with httpx.Client(base_url=api_server.url, timeout=30) as http:
        assert http.get(path).status_code == 200
        # A client behind a proxy: uvicorn takes its address from X-Forwarded-For (the proxy is on
        # loopback, which it trusts); a proxy that names its client otherwise is not local either.
        for header in (
            {"X-Forwarded-For": "203.0.113.9"},
            {"X-Real-IP": "203.0.113.9"},
            {"Forwarded": "for=203.0.113.9"},
            {"X-Forwarded-For": "127.0.0.1"},
        ):
            refused = http.get(path, headers=header)
            assert refused.status_code == 403, (header, refused.text)
            assert "loopback clients only" in refused.json()["detail"]


@pytest.fixture
def token_server(api_settings, redis_url):
    with serve(
        api_settings.with_overrides(dashboard_token="op-secret", metrics_token="scrape-secret"), redis_url
    ) as server:
        yield server


@pytest.mark.parametrize(
    "path, opened_by",
    [
        ("/metrics", {"op-secret", "scrape-secret"}),
        ("/dashboard/data.json", {"op-secret"}),
        ("/dashboard", {"op-secret"}),
    ],
)
def test_with_tokens_set_each_route_takes_its_own_as_a_bearer_token(token_server, new_key, path, opened_by):
    with httpx.Client(base_url=token_server.url, timeout=30) as http:
        for token in ("op-secret", "scrape-secret", "op-secretx", "op", new_key()):
            answer = http.get(path, headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == (200 if token in opened_by else 401), (token, answer.text)
        missing = http.get(path)  # loopback opens nothing once a token is set
        assert missing.status_code == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
        assert http.get(path, headers={"Authorization": "Basic op-secret"}).status_code == 401


@pytest.mark.parametrize("path", OPERATOR_PATHS)
def test_a_token_in_the_query_string_is_refused(token_server, path):
    with httpx.Client(base_url=token_server.url, timeout=30) as http:
        for name in ("token", "access_token"):
            refused = http.get(f"{path}?{name}=op-secret", headers={"Authorization": "Bearer op-secret"})
            assert refused.status_code == 400, refused.text
            assert "Authorization: Bearer" in refused.json()["detail"]


def test_a_browser_logs_in_with_the_token_in_a_form_and_keeps_a_cookie_that_holds_no_token(token_server):
    with httpx.Client(base_url=token_server.url, timeout=30) as http:
        page = http.get("/dashboard")
        assert page.status_code == 401 and '<form method="post" action="/dashboard/login">' in page.text
        wrong = http.post("/dashboard/login", data={"token": "op-secretx"})
        assert wrong.status_code == 401 and "not the operator token" in wrong.text and not http.cookies
        refused = http.post("/dashboard/login?token=op-secret", data={"token": "op-secret"})
        assert refused.status_code == 400 and not http.cookies

        done = http.post("/dashboard/login", data={"token": "op-secret"})
        assert done.status_code == 303 and done.headers["location"] == "/dashboard"
        cookie = done.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/dashboard" in cookie
        assert "Secure" not in cookie and "op-secret" not in cookie  # plain HTTP here; no token inside
        for path in ("/dashboard", "/dashboard/data.json", "/dashboard/static/console.js"):
            assert http.get(path).status_code == 200, path
        assert "Content-Security-Policy" in http.get("/dashboard").headers
        assert http.get("/metrics").status_code == 401  # the console's cookie opens the console only

        value = http.cookies["synth_console"]
        expires, signature = value.split(".")
        for sent, status in (
            (value, 200),
            (f"{int(expires) + 99}.{signature}", 401),
            (f"{expires}.{'0' * 64}", 401),
            ("1.x", 401),
            ("x", 401),
        ):
            answer = httpx.get(token_server.url + "/dashboard/data.json", headers={"Cookie": f"synth_console={sent}"})
            assert answer.status_code == status, sent
        assert http.post("/dashboard/logout").status_code == 303
        assert not http.cookies and http.get("/dashboard/data.json").status_code == 401


def test_over_https_the_session_cookie_is_secure(token_server):
    # uvicorn takes the scheme from X-Forwarded-Proto sent by a proxy on loopback, as in front of the API
    with httpx.Client(base_url=token_server.url, timeout=30) as http:
        done = http.post("/dashboard/login", data={"token": "op-secret"}, headers={"X-Forwarded-Proto": "https"})
        assert done.status_code == 303 and "Secure" in done.headers["set-cookie"]


def test_login_tries_from_one_address_are_limited(token_server):
    with httpx.Client(base_url=token_server.url, timeout=30) as http:
        answers = [http.post("/dashboard/login", data={"token": f"guess-{i}"}) for i in range(12)]
    assert [a.status_code for a in answers[:10]] == [401] * 10
    assert answers[10].status_code == 429 and int(answers[10].headers["Retry-After"]) > 0
