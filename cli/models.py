"""``synth models``: model files for the engines."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def models() -> None:
    """Model checkpoints for synth's engines: make-tiny writes a random-weight Orpheus checkpoint
    for tests and CPU demos."""


@models.command("make-tiny")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", default=0, show_default=True, help="Seed for the random weights.")
@click.option(
    "--shape",
    type=click.Choice(["tiny", "orpheus-3b"]),
    default="tiny",
    show_default=True,
    help="orpheus-3b: full-size random weights (6.6 GB, bf16) for GPU benchmarks.",
)
def make_tiny_command(directory: Path, seed: int, shape: str) -> None:
    """Write a tiny random-weight Orpheus checkpoint into DIRECTORY.

    The folder has the real on-disk layout (config.json, model.safetensors, a tokenizer with the
    Orpheus token ids, and snac/ with a tiny SNAC 24 kHz codec), so the real loaders read it. Its
    audio is noise; it exists for tests and CPU demos:

    \b
        synth models make-tiny /tmp/orpheus-tiny
        SYNTH_ENGINE=orpheus SYNTH_MODEL=/tmp/orpheus-tiny synth worker
    """
    try:
        from pipeline.engines.orpheus.tiny import make_tiny
    except ImportError as e:
        raise click.ClickException(f"make-tiny needs the orpheus extra: pip install 'synth[orpheus]' ({e})") from e
    out = make_tiny(directory, seed=seed, shape=shape)
    click.echo(f"wrote a tiny Orpheus checkpoint to {out} (codec in {out / 'snac'})")
