"""`synth api`: the REST API under uvicorn (api/server.py: its connection limits)."""

from __future__ import annotations

import ipaddress

import click

from cli.context import broker, open_database
from pipeline.errors import InputError
from pipeline.settings import Settings
from worker.app import make_producer
from worker.enqueue import check_broker


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (0.0.0.0: every interface, as behind a load balancer).",
)
@click.option("--port", default=8000, show_default=True, type=int, help="Port to listen on.")
def api(host: str, port: int) -> None:
    """Serve the REST API (OpenAPI at /openapi.json, docs at /docs). Needs the database at the
    current schema; with no SYNTH_REDIS_URL it starts the embedded Redis (then workers must run on
    this machine: `synth worker`)."""
    try:
        from api import server
        from api.app import create_app
    except ImportError as e:
        raise InputError(f"the API needs its extra: pip install 'synth[api]' ({e})") from e
    settings = Settings()
    open_database(settings)  # refuse to start on an unmigrated database
    if (warning := closed_routes_warning(host, settings)) is not None:
        click.echo(f"warning: {warning}", err=True)
    with broker(settings) as broker_url:
        # The app's start connects to Redis; unreachable, uvicorn would print a traceback and
        # "Application startup failed". Said here in one line, with the address, as submit does.
        check_broker(make_producer(settings, broker_url))
        server.fit_file_limit(settings.api_max_connections)
        httpd = server.server(
            create_app(settings, broker_url=broker_url, serving=True), settings, host=host, port=port, log_level="info"
        )
        try:
            httpd.run()
        except KeyboardInterrupt:  # uvicorn raises the Ctrl-C it held back once it has shut down
            pass
    if not httpd.started:
        raise SystemExit(STARTUP_FAILURE)


STARTUP_FAILURE = 3  # uvicorn's exit status for an app that did not start


def closed_routes_warning(host: str, settings: Settings) -> str | None:
    """Listening beyond loopback, which operator routes no token opens (they answer loopback only)."""
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        if host == "localhost":
            return None
    closed = [
        route
        for route, tokens in (
            ("/dashboard", [settings.dashboard_token]),
            ("/metrics", [settings.metrics_token, settings.dashboard_token]),
        )
        if not any(tokens)
    ]
    if not closed:
        return None
    return (
        f"{' and '.join(closed)} answer loopback clients only: set SYNTH_DASHBOARD_TOKEN "
        f"(and SYNTH_METRICS_TOKEN for a Prometheus scraper) to open them to others with a Bearer token"
    )
