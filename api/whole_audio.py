"""Audio whose length is known when the response starts (a finished job: its stored file, or a live
copy that has ended, or one a client that reads it whole waited for) is sent whole, with Content-Length and, for WAV, the real sizes in the header
instead of the open-ended ones a stream carries (readers such as Python's ``wave`` trust them)."""

from __future__ import annotations

import struct
import subprocess
from collections.abc import AsyncIterator

from fastapi import HTTPException
from fastapi.responses import Response

from api.streaming import CONTENT_TYPES, LiveStreamError, encode, wav_pcm
from pipeline.audio import ffmpeg_exe
from pipeline.errors import StorageError


async def whole(
    pcm: AsyncIterator[bytes],
    sample_rate: int,
    fmt: str,
    *,
    job_id: str,
    speed: float = 1.0,
    pcm_rate: int | None = None,
    headers: dict | None = None,
    failed_status: int = 409,
) -> Response:
    """Encode all of ``pcm`` as ``fmt`` and answer it in one body: a complete source, or a live one
    waited out (HTTP ``failed_status`` if it breaks first)."""
    try:
        data = b"".join([chunk async for chunk in encode(pcm, sample_rate, fmt, speed, pcm_rate)])
    except LiveStreamError as e:
        raise HTTPException(failed_status, detail=f"job {job_id} has no complete audio: {e}") from e
    if fmt == "wav":
        data = with_sizes(data)
    return Response(data, media_type=CONTENT_TYPES[fmt], headers=headers)


def with_sizes(wav: bytes) -> bytes:
    """A WAV written to a pipe (RIFF and data sizes unknown: 0xFFFFFFFF, or 0) with the real sizes."""
    out = bytearray(wav)
    pos = 12
    while pos + 8 <= len(out):
        chunk, size = out[pos : pos + 4], struct.unpack_from("<I", out, pos + 4)[0]
        if chunk == b"data":
            struct.pack_into("<I", out, pos + 4, len(out) - pos - 8)
            break
        pos += 8 + size + (size & 1)
    struct.pack_into("<I", out, 4, len(out) - 8)
    return bytes(out)


def stored_pcm(data: bytes, fmt: str) -> tuple[int, bytes]:
    """(sample rate, PCM16 mono) of a stored file: WAV read directly, the others decoded by ffmpeg."""
    if fmt == "wav":
        return wav_pcm(data)
    done = subprocess.run(
        [
            ffmpeg_exe(),
            "-hide_banner",
            "-loglevel",
            "error",
            "-i",
            "pipe:0",
            "-ac",
            "1",
            "-c:a",
            "pcm_s16le",
            "-f",
            "wav",
            "pipe:1",
        ],
        input=data,
        capture_output=True,
    )
    if done.returncode != 0:
        raise StorageError(f"the stored {fmt} file cannot be decoded: {done.stderr.decode(errors='replace')[:300]}")
    return wav_pcm(with_sizes(done.stdout))
