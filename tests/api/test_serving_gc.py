"""`synth api` freezes what its start built out of the garbage collector's scans; an app made for
a test session (built and dropped many times) does not."""

from __future__ import annotations

import gc

import httpx

from api.app import create_app
from tests.api.conftest import Server


def test_a_serving_app_freezes_its_boot_objects_and_a_test_app_does_not(api_settings, redis_url):
    gc.unfreeze()
    try:
        with Server(create_app(api_settings, broker_url=redis_url), api_settings) as server:
            assert httpx.get(server.url + "/healthz").status_code == 200
            assert gc.get_freeze_count() == 0
        with Server(create_app(api_settings, broker_url=redis_url, serving=True), api_settings) as server:
            assert httpx.get(server.url + "/healthz").status_code == 200
            # FastAPI, pydantic, SQLAlchemy and the routes: tens of thousands of objects
            assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
