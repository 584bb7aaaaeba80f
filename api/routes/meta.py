"""What clients may ask for: voices and formats."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import CurrentKey, KeyFirstRoute, Settings
from api.schemas import Formats, Voices
from api.streaming import SPEECH_FORMATS, STREAM_FORMATS
from pipeline.engines.registry import engine_voices
from pipeline.settings import FORMATS
from pipeline.submit import SAMPLE_RATES

router = APIRouter(prefix="/v1", tags=["meta"], route_class=KeyFirstRoute)


@router.get("/voices", response_model=Voices)
def voices(_: CurrentKey, settings: Settings) -> Voices:
    names = list(engine_voices(settings.engine_settings()))
    return Voices(engine=settings.engine, default=settings.default_voice or (names[0] if names else None), voices=names)


@router.get("/formats", response_model=Formats)
def formats(_: CurrentKey) -> Formats:
    return Formats(
        formats=list(FORMATS),
        sample_rates=list(SAMPLE_RATES),
        stream_formats=list(STREAM_FORMATS),
        speech_formats=list(SPEECH_FORMATS),
    )
