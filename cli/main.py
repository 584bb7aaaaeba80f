"""Entry point: `synth`."""

from __future__ import annotations

import importlib
import logging
import os
import sys

import click
from pydantic import ValidationError

from pipeline.errors import EngineUnavailableError, InputError, ServiceUnavailableError, StorageError, SynthError


# Each command's module is imported when that command runs: importing them all (the API's web
# stack, the worker's, the report's) cost `synth submit` more than its own work.
COMMANDS = {
    "api": "cli.api:api",
    "assemble": "cli.document:assemble",
    "beat": "cli.beat:beat",
    "cancel": "cli.batches:cancel",
    "check": "cli.check:check",
    "db": "cli.db:db",
    "delete": "cli.batches:delete",
    "fetch": "cli.inspect:fetch",
    "keys": "cli.keys:keys",
    "lexicon": "cli.lexicon:lexicon",
    "models": "cli.models:models",
    "report": "cli.report:report",
    "rerender": "cli.document:rerender",
    "retry": "cli.batches:retry",
    "status": "cli.inspect:status",
    "submit": "cli.submit:submit",
    "usage": "cli.usage:usage_",
    "worker": "cli.worker:worker",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name].split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False),
    help="TOML settings file (same keys as the SYNTH_* variables, lower case).",
)
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
@click.version_option(package_name="synth")
def cli(config: str | None, verbose: int) -> None:
    """synth: turn a lot of text into speech on your own CPUs and GPUs.

    With no SYNTH_* settings everything is embedded: SQLite and an object folder under
    ~/.local/share/synth, and a private Redis. Set SYNTH_REDIS_URL, SYNTH_DATABASE_URL and
    SYNTH_S3_BUCKET (+ SYNTH_S3_ENDPOINT_URL) to use real services.
    """
    if config:
        os.environ["SYNTH_CONFIG"] = config
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# An engine that cannot start is a setting (or a missing extra) to fix, like bad input: exit 2.
EXIT_CODES = (
    (InputError, 2),
    (EngineUnavailableError, 2),
    (ServiceUnavailableError, 3),
    (StorageError, 3),
    (SynthError, 1),
)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except ValidationError as e:
        first = e.errors()[0]
        click.echo(f"error: bad setting {'.'.join(map(str, first['loc']))}: {first['msg']}", err=True)
        sys.exit(2)
    except SynthError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(next(code for cls, code in EXIT_CODES if isinstance(e, cls)))


if __name__ == "__main__":
    main()
