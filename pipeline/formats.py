"""The output formats: extension, content type and encoder arguments. Apart from pipeline/audio.py
(and numpy), so that what only names or checks a format, such as `synth submit`, does not load
the encoder."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.errors import UnknownFormatError
from pipeline.settings import FORMATS


@dataclass(frozen=True)
class Format:
    extension: str
    content_type: str
    export_args: dict
    lossy: bool = False  # its decoder can rebuild peaks above the input's (pipeline/loudness.py)


_FORMATS = {
    "wav": Format("wav", "audio/wav", {"format": "wav"}),
    "mp3": Format("mp3", "audio/mpeg", {"format": "mp3", "codec": "libmp3lame", "bitrate": "64k"}, lossy=True),
    "ogg": Format("ogg", "audio/ogg", {"format": "ogg", "codec": "libopus", "bitrate": "32k"}, lossy=True),
    "flac": Format("flac", "audio/flac", {"format": "flac"}),
}
assert set(_FORMATS) == set(FORMATS)


def get_format(name: str) -> Format:
    try:
        return _FORMATS[name]
    except KeyError:
        raise UnknownFormatError(f"unknown format {name!r}; choose one of {', '.join(FORMATS)}") from None
