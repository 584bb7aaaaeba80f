"""`synth check`"""

from __future__ import annotations

import json
from pathlib import Path

import click

from pipeline.audio import decode
from pipeline.errors import InputError
from pipeline.settings import Settings
from pipeline.textfront import VoiceProfile
from pipeline.verify import captions, verdict
from pipeline.verify.recognizer import load_recognizer


@click.command()
@click.argument("audio", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--text", help="The text the audio should say.")
@click.option(
    "--text-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A UTF-8 file holding the text the audio should say (instead of --text).",
)
@click.option(
    "--language",
    default="en_US",
    show_default=True,
    help="The language the audio speaks; without a recognizer for it the verdict is not_checked.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict, scores and word timings as JSON.")
@click.option(
    "--captions",
    "caption_format",
    type=click.Choice(captions.FORMATS),
    help="Print the word timings as captions (json, srt or vtt) instead of the report.",
)
def check(
    audio: Path, text: str | None, text_file: Path | None, language: str, as_json: bool, caption_format: str | None
) -> None:
    """Check that AUDIO (any file ffmpeg reads) says its text: the verdict (clean, suspect, bad or
    not_checked), its scores and reasons, and the time of each word.

    Exit 0 for clean, 1 for suspect or bad, 2 for bad input; the same check workers run.

    \b
    Examples:
      synth check line-000001.wav --text "The library opens at nine."
      synth check take.mp3 --text-file script.txt --json
      synth check take.mp3 --text-file script.txt --captions srt > take.srt
    """
    if (text is None) == (text_file is None):
        raise InputError("give the text with --text or --text-file (one of them)")
    if text_file is not None:
        try:
            text = text_file.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as e:
            raise InputError(f"{text_file}: not UTF-8 text (byte {e.start})") from e
    assert text is not None  # one of the two, checked above
    if not text.strip():
        # an empty text is a slip of the shell or the script, not a check that passes
        raise InputError("the text is empty: give the words the audio should say")
    samples, rate = decode(audio.read_bytes())
    recognizer = load_recognizer(Settings().verify_recognizer)
    result = verdict.check(samples, rate, text, VoiceProfile("check", (language,)), recognizer)
    if caption_format:
        words = result.caption_words
        if result.words is None or words is None:  # (the second follows from the first)
            raise click.ClickException(f"no word timings: {'; '.join(result.reasons) or 'alignment failed'}")
        click.echo(captions.render(words, caption_format), nl=False)
    elif as_json:
        click.echo(json.dumps(result.as_dict(), ensure_ascii=False, indent=1))
    else:
        _report(result)
    raise SystemExit(0 if result.status in (verdict.CLEAN, verdict.NOT_CHECKED) else 1)


def _report(result: verdict.Verdict) -> None:
    click.echo(f"verdict: {result.status}" + (f" ({'; '.join(result.reasons)})" if result.reasons else ""))
    for name, value in result.scores.items():
        click.echo(f"  {name}: {value}")
    if result.transcript is not None:
        click.echo(f"heard: {result.transcript}")
    for word in result.words or ():
        click.echo(f"  {word.start:7.2f} {word.end:7.2f}  {word.word}")
