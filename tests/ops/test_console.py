"""The operator's console in headless Chromium (Debian's chromium) while a batch renders: a real
API on a loopback port, a Celery worker thread with Piper and its heartbeat, PostgreSQL holding a
day of known history, Redis holding queue depth samples. The test reads the DOM Chromium rendered
after the page's script ran, twice, and the screenshot's pixels; the screenshot is kept under
out/artifacts/ (docs/operations.md shows one)."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import redis
from sqlalchemy import func, select

from api.console import CACHE_S
from pipeline import api_keys
from pipeline.db.models import Job, JobStatus
from pipeline.live import redis_client_url
from pipeline.reports import fleet
from pipeline.routing import all_queues
from pipeline.submit import BatchOptions, Item, create_item_batch
from tests.api.conftest import serve
from tests.cli_helpers import REPO
from tests.conftest import IN_CI
from tests.ops.console_data import EPYC, H100, fill_day, sample_depths
from tests.waiting import eventually
from tests.workers import thread_worker

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = REPO / "out" / "artifacts"
LINE = "The quarterly figures were read aloud to the board, one careful line at a time."
# series colours of api/static/console.js: the 2nd and 4th series of a plot
ORANGE, PURPLE = (0xE6, 0x51, 0x00), (0x6A, 0x1B, 0x9A)


def chromium(*args: str, tmp: Path, size: str = "1280,2300") -> str:
    proc = subprocess.run(
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
            f"--window-size={size}",
            "--hide-scrollbars",
            "--virtual-time-budget=3000",
            *args,
        ],
        capture_output=True,
        timeout=120,
    )
    return proc.stdout.decode()


def counted(sessions, batch_id: str) -> int:
    with sessions() as s:
        return s.scalar(
            select(func.count()).where(Job.batch_id == batch_id, Job.status.in_([JobStatus.DONE, JobStatus.FAILED]))
        )


def progress_of(dom: str, batch_id: str) -> float:
    found = re.search(rf'class="bar" data-progress="([0-9.]+)" data-batch="{batch_id}"', dom)
    assert found, f"no progress bar for batch {batch_id} in the console"
    return float(found.group(1))


def plot_of(dom: str, name: str) -> str:
    return dom.split(f'id="plot-{name}"', 1)[1].split("</figure>", 1)[0]


@pytest.fixture
def worker_app(settings, redis_url, piper_engine):
    from worker.app import make_app
    from worker.boot import boot
    from worker.metrics import install

    app = make_app(settings, redis_url)
    boot(app, engine=piper_engine)
    installed = install(app, redis_url, name="cpu-host/piper", interval=1.0)
    yield app
    installed.uninstall()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)  # the percentiles in SQL
def test_the_console_shows_a_running_batch_plots_workers_and_failures_in_headless_chromium(
    settings, sessions, redis_url, worker_app, tmp_path
):
    if CHROMIUM is None:
        if IN_CI:
            pytest.fail("chromium is missing: `make test` installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed")
    queues = all_queues(settings.bucket_seconds)
    with sessions() as s:
        fill_day(s)
        key = api_keys.create_key(s, name="acme").key
        batch = create_item_batch(
            s,
            settings,
            [Item(text="!!!", client_id="bad")] + [Item(text=LINE)] * 40,
            BatchOptions(name="board-minutes"),
            source="api",
            owner_key_id=key.id,
        )
        s.commit()
        bad = s.scalar(select(Job.id).where(Job.batch_id == batch.id, Job.client_id == "bad"))
    client = redis.Redis.from_url(redis_client_url(redis_url))
    sample_depths(client, queues)
    # a worker that stopped beating a minute ago: its heartbeat has not expired yet
    fleet.write_heartbeat(
        client, "gpu-host/gpu0", {"device": H100, "engine": "orpheus", "rows": 64, "jobs_in_flight": 0}, ttl=300
    )
    client.hset(fleet.WORKER_PREFIX + "gpu-host/gpu0", "last_seen", f"{time.time() - 60:.3f}")

    from worker.enqueue import enqueue_batch

    with (
        serve(settings.with_overrides(api_rate_limit=0), redis_url) as server,
        thread_worker(worker_app, queues, concurrency=1),
    ):
        url = server.url + "/dashboard"
        enqueue_batch(worker_app, sessions, batch.id, jobs_per_task=1)
        eventually(lambda: counted(sessions, batch.id) >= 3, 120, "the batch to start", interval=0.2)
        first = chromium("--dump-dom", url, tmp=tmp_path)
        before = counted(sessions, batch.id)
        eventually(lambda: counted(sessions, batch.id) >= before + 3, 120, "more jobs to finish", interval=0.2)
        time.sleep(CACHE_S)
        second = chromium("--dump-dom", url, tmp=tmp_path)
        shot = tmp_path / "console.png"
        chromium(f"--screenshot={shot}", url, tmp=tmp_path)

    assert 0 < progress_of(first, batch.id) < progress_of(second, batch.id) < 1
    assert "board-minutes" in second and "acme" in second
    # the failed job, with its reason, owner and a link to its resource
    assert f'<a href="/v1/jobs/{bad}">{bad[:12]}</a>' in second and "nothing speakable in line" in second
    # the worker's heartbeat: device, engine, rows in use
    assert "cpu-host/piper" in second and "<td>piper</td>" in second
    assert '<tr class="stale"><td>gpu-host/gpu0</td>' in second and "0 / 64" in second
    assert re.search(r"<td>[0-9]+ / [0-9]+</td><td class=\"inflight\">", second)
    # each plot drew its series (uPlot's legend names them; the canvas is checked in pixels below)
    assert f">{H100}<" in plot_of(second, "audio") and f">{EPYC}<" in plot_of(second, "audio")
    assert all(f">{s}<" in plot_of(second, "ttfb") for s in ("batch p50", "batch p95", "realtime p50", "realtime p95"))
    assert all(f">{q}<" in plot_of(second, "queues") for q in queues[:2])
    assert ">retries exhausted<" in plot_of(second, "failures")
    assert all("<canvas" in plot_of(second, p) for p in ("audio", "ttfb", "queues", "failures"))

    assert shot.is_file()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTIFACTS / "console.png")
    from PIL import Image

    img = Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")
    colours = {ORANGE: 0, PURPLE: 0}
    for pixel in zip(*[iter(img.tobytes())] * 3):
        if pixel in colours:
            colours[pixel] += 1
    assert colours[ORANGE] > 200 and colours[PURPLE] > 50, colours  # lines drawn on the canvases
