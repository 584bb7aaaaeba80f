"""Dependencies of the routes, as Annotated aliases: ``key: CurrentKey``, ``session: Session``; and
``KeyFirstRoute``, the route class of the routers whose routes take a key."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session as OrmSession
from starlette.concurrency import run_in_threadpool

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


KEY_SCOPE = "synth.key"  # where KeyFirstRoute leaves the key for the dependency


def authenticate(state: ApiState, authorization: str | None) -> ApiKey:
    """The key ``Authorization: Bearer ...`` names (401 without a valid one), counted against its
    rate limit (429)."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(
            401,
            detail="missing API key: send `Authorization: Bearer sk_synth_...`",
            headers={"WWW-Authenticate": "Bearer"},
        )
    with state.sessions() as session:
        key = api_keys.authenticate(session, token)
    if key is None:
        raise HTTPException(401, detail="invalid or revoked API key", headers={"WWW-Authenticate": "Bearer"})
    check_rate(state.redis, key.id, limit=state.settings.api_rate_limit, window=state.settings.api_rate_window)
    return key


async def current_key(
    request: Request, state: State, _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> ApiKey:
    """The caller's key: the one KeyFirstRoute checked before the body was read (on a route of
    another class, checked here). ``_bearer`` puts the scheme in the OpenAPI document."""
    key: ApiKey | None = request.scope.get(KEY_SCOPE)
    if key is None:
        key = await run_in_threadpool(authenticate, state, request.headers.get("authorization"))
    return key


CurrentKey = Annotated[ApiKey, Depends(current_key)]
# A route's ``responses=``, as FastAPI types it: the tables the routes share are declared so
Responses = dict[int | str, dict[str, Any]]


class KeyFirstRoute(APIRoute):
    """A route that takes ``CurrentKey`` checks the key before anything reads the request's body:
    a caller without a valid key gets 401 (or 429), never a 422 for a body read and parsed for
    nobody, and the body stays unread in the socket. Its errors pass through the app's handlers
    (the error format, 503 for a service down), as the dependency's would."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if not _takes(self.dependant, current_key):
            return handler

        async def key_first(request: Request) -> Response:
            request.scope[KEY_SCOPE] = await run_in_threadpool(
                authenticate, get_state(request), request.headers.get("authorization")
            )
            return await handler(request)

        return key_first


def _takes(dependant: Dependant, call: Callable) -> bool:
    return dependant.call is call or any(_takes(d, call) for d in dependant.dependencies)
