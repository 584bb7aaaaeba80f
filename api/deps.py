"""Dependencies of the routes, as Annotated aliases: ``key: CurrentKey``, ``session: Session``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session as OrmSession

from api.state import ApiState
from api.limits import check_rate
from pipeline import api_keys
from pipeline.db.models_api import ApiKey
from pipeline.settings import Settings as SynthSettings

_bearer = HTTPBearer(auto_error=False, description="An API key from `synth keys create`")


def get_state(request: Request) -> ApiState:
    return request.app.state.synth


State = Annotated[ApiState, Depends(get_state)]


def get_session(state: State) -> Iterator[OrmSession]:
    with state.sessions() as session:
        yield session


Session = Annotated[OrmSession, Depends(get_session)]


def get_settings(state: State) -> SynthSettings:
    return state.settings


Settings = Annotated[SynthSettings, Depends(get_settings)]


def current_key(state: State, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> ApiKey:
    """The caller's key (401 without a valid one), counted against its rate limit (429)."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(401, detail="missing API key: send `Authorization: Bearer sk_synth_...`",
                            headers={"WWW-Authenticate": "Bearer"})
    with state.sessions() as session:
        key = api_keys.authenticate(session, credentials.credentials)
    if key is None:
        raise HTTPException(401, detail="invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"})
    check_rate(state.redis, key.id, limit=state.settings.api_rate_limit, window=state.settings.api_rate_window)
    return key


CurrentKey = Annotated[ApiKey, Depends(current_key)]
