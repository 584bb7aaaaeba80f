"""`synth api`: the REST API under uvicorn."""

from __future__ import annotations

import click

from cli.context import broker, open_database
from pipeline.errors import InputError
from pipeline.settings import Settings
from worker.app import make_producer
from worker.enqueue import check_broker


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface, as behind a load balancer).")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to listen on.")
def api(host: str, port: int) -> None:
    """Serve the REST API (OpenAPI at /openapi.json, docs at /docs). Needs the database at the
    current schema; with no SYNTH_REDIS_URL it starts the embedded Redis (then workers must run on
    this machine: `synth worker`)."""
    try:
        import uvicorn

        from api.app import create_app
    except ImportError as e:
        raise InputError(f"the API needs its extra: pip install 'synth[api]' ({e})") from e
    settings = Settings()
    open_database(settings)  # refuse to start on an unmigrated database
    with broker(settings) as broker_url:
        # The app's start connects to Redis; unreachable, uvicorn would print a traceback and
        # "Application startup failed". Said here in one line, with the address, as submit does.
        check_broker(make_producer(settings, broker_url))
        uvicorn.run(create_app(settings, broker_url=broker_url, serving=True), host=host, port=port, log_level="info")
