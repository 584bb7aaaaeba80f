"""The dashboard in headless Chromium (Debian's chromium) against a real uvicorn on a loopback port,
with a database holding a published report, queues with messages waiting in Redis and two worker
heartbeats. The test reads the DOM Chromium rendered and the screenshot's pixels."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis

from pipeline import deadletter
from pipeline.live import redis_client_url
from pipeline.reports import fleet
from pipeline.reports.publish import publish_report
from pipeline.storage import make_store
from synth_testkit.ports import free_port
from tests.conftest import IN_CI
from tests.reports.known_fleet import PRICES, T0, UNTIL, fill
from tests.waiting import eventually

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REPORT_MAGENTA = (0xC2, 0x18, 0x5B)  # .card .value in api/templates/dashboard.html
DEPTH_BLUE = (0x15, 0x65, 0xC0)  # .depth


def make_app(settings, redis_url):
    from api.app import create_app

    return create_app(settings, broker_url=redis_url)


@pytest.fixture
def server(request, settings, sessions, redis_url):
    """The API with the operator token ``request.param`` (default op-secret; None: unset)."""
    settings = settings.with_overrides(gpu_prices=PRICES, dashboard_token=getattr(request, "param", "op-secret"))
    with sessions() as s:
        fill(s)
    publish_report(sessions, make_store(settings), T0, UNTIL, gpu_prices=PRICES)
    client = redis.Redis.from_url(redis_client_url(redis_url))
    client.rpush("batch.le10s", *[b"m"] * 7)  # seven messages waiting; no worker consumes them here
    client.rpush("realtime", b"m")
    client.rpush("verify", b"m", b"m")
    for raw in (b"not json", b"[1, 2]"):  # two messages a worker could not act on
        deadletter.record(client, queue="batch.le10s", reason="test", message=raw)
    fleet.write_heartbeat(
        client,
        "gpu-host-1/gpu0",
        {
            "device": "NVIDIA H100 80GB HBM3",
            "engine": "orpheus",
            "model": "orpheus-3b",
            "quantization": "int8",
            "jobs_in_flight": 12,
        },
    )
    fleet.write_heartbeat(
        client,
        "cpu-host/cpu",
        {
            "device": "AMD EPYC",
            "engine": "piper",
            "model": "en_US-joe-medium",
            "quantization": "none",
            "jobs_in_flight": 3,
        },
    )
    import uvicorn

    port = free_port()
    srv = uvicorn.Server(
        uvicorn.Config(make_app(settings, redis_url), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()

    def started() -> bool:
        assert thread.is_alive(), "uvicorn's thread ended before it started"
        return srv.started

    eventually(started, 30, "uvicorn to start")
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


def get(url, token=None):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.read()


def test_data_json_and_the_operator_token(server):
    with pytest.raises(urllib.error.HTTPError) as e:
        get(server + "/dashboard/data.json")
    assert e.value.code == 401
    status, body = get(server + "/dashboard/data.json", token="op-secret")
    data = json.loads(body)
    assert data["queues"]["batch.le10s"] == 7 and data["queues"]["realtime"] == 1 and data["deadletter"] == 2
    assert data["queues"]["verify"] == 2
    assert data["latest_report"]["headline"]["jobs_done"] == 5
    assert data["latest_report"]["headline"]["x_realtime"] == pytest.approx(4100 / 1300)
    assert {w["name"]: w["jobs_in_flight"] for w in data["workers"]} == {"gpu-host-1/gpu0": "12", "cpu-host/cpu": "3"}


def chromium(*args: str, tmp: Path, size: tuple[int, int] = (1280, 2300)) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            f"--user-data-dir={tmp / 'profile'}",
            f"--window-size={size[0]},{size[1]}",
            "--hide-scrollbars",
            *args,
        ],
        capture_output=True,
        timeout=120,
    )


# A browser sends no Bearer header: with no token set, the page answers it over loopback.
@pytest.mark.parametrize("server", [None], indirect=True)
def test_dashboard_in_headless_chromium(server, tmp_path):
    if CHROMIUM is None:
        if IN_CI:
            pytest.fail("chromium is missing: `make test` installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed")
    url = server + "/dashboard"
    dom = chromium("--dump-dom", url, tmp=tmp_path).stdout.decode()
    assert 'id="h-jobs_done">5<' in dom and 'id="h-x_realtime">3.15<' in dom
    assert 'id="h-jobs_done">5</div><div class="change">+400.0 % vs previous period<' in dom
    assert 'id="h-audio_hours">1.14<' in dom and 'id="h-ttfb_p95_s">4.00<' in dom
    assert '<td>batch.le10s</td><td class="depth">7</td>' in dom and 'id="deadletter">2<' in dom
    assert "gpu-host-1/gpu0" in dom and '<td class="inflight">12</td>' in dom and "orpheus-3b" in dom

    shot = tmp_path / "dashboard.png"
    proc = chromium(f"--screenshot={shot}", url, tmp=tmp_path)
    assert shot.is_file(), proc.stderr.decode()[-2000:]
    from PIL import Image

    img = Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")
    assert img.size == (1280, 2300)
    raw = img.tobytes()
    pixels = [tuple(raw[i : i + 3]) for i in range(0, len(raw), 3)]
    gray = [sum(p) / 3 for p in pixels]
    mean = sum(gray) / len(gray)
    assert sum((g - mean) ** 2 for g in gray) / len(gray) > 100  # not a blank page
    counts = {c: 0 for c in (REPORT_MAGENTA, DEPTH_BLUE)}
    for p in pixels:
        if p in counts:
            counts[p] += 1
    # The report's numbers (magenta, 30 px bold) and the queue depths (blue) were drawn.
    assert counts[REPORT_MAGENTA] > 500 and counts[DEPTH_BLUE] > 50, counts
