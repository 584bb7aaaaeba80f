"""A revoked key's open live streams end within seconds.

A revoked key's requests get 401 at once (api/deps.py looks the key up on every request), and its
queued jobs are cancelled by `synth keys revoke` and, for one that slipped in, by the worker's
claim (pipeline/db/jobs.py). What remains is the streams it opened before: while any stream is
open, the API asks the database every ``CHECK_S`` which of their keys were revoked (one query for
all of them, off the event loop) and cuts those keys' streams, ahead of any audio still queued
for them. The database is the record of revocation, so this holds however a key was revoked and
needs nothing from the revoking side; it costs the realtime path nothing.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from api.state import ApiState
from api.streaming import KeyRevokedError
from pipeline import api_keys
from pipeline.plural import counted

log = logging.getLogger(__name__)

CHECK_S = 2.0


async def watch(state: ApiState) -> None:
    """Run for the life of the API process (its lifespan cancels it)."""
    while True:
        await asyncio.sleep(CHECK_S)
        owners = state.live.owners()
        if not owners:
            continue
        try:
            revoked = await run_in_threadpool(_revoked, state, owners)
        except SQLAlchemyError as e:  # the database is away: check again at the next turn
            log.warning("could not check for revoked keys: %s", e)
            continue
        for key_id in revoked:
            ended = state.live.end_owner(key_id, KeyRevokedError("the API key was revoked"))
            if ended:
                log.info("key %s revoked: %s ended", key_id, counted(ended, "live stream"))


def _revoked(state: ApiState, key_ids: list[str]) -> list[str]:
    with state.sessions() as session:
        return api_keys.revoked_among(session, key_ids)
