"""The API with Redis gone after it started: routes that need Redis answer 503 naming it, with
Retry-After, and come back with it; nothing answers 500."""

from __future__ import annotations

import httpx

from synth_testkit.faults import RedisProcess
from synth_testkit.ports import free_port
from tests.api.conftest import serve
from tests.waiting import eventually


def test_routes_that_need_redis_say_redis_is_down_and_recover_with_it(api_settings, tmp_path):
    server = RedisProcess(tmp_path / "redis", free_port())
    with server:
        with serve(api_settings, server.url) as api, httpx.Client(base_url=api.url, timeout=30) as http:
            assert http.get("/dashboard/data.json").status_code == 200
            server.kill()
            for path in ("/dashboard/data.json", "/dashboard", "/readyz"):
                r = http.get(path)
                assert r.status_code == 503, (path, r.text)
                assert "redis" in r.text.lower(), (path, r.text)
            down = http.get("/dashboard/data.json")
            assert down.headers["Retry-After"] == "5"
            assert down.json()["detail"].startswith("Redis is unreachable: ")
            server.start()
            eventually(
                lambda: http.get("/dashboard/data.json").status_code == 200,
                30,
                "the dashboard to answer again with Redis back",
                interval=0.2,
            )
