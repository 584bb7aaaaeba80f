"""Fuzz the published OpenAPI document with schemathesis and every check it has (`--checks all`):
no request, however odd, gets a 5xx, and every answer is one the document promises (status codes,
media types, bodies, OPTIONS, 405s, auth, resources that exist after creation and are gone after
deletion). A real worker renders whatever the fuzzer's jobs ask for.

The engine the `schemathesis run` command drives, with the repository's schemathesis.toml (so a run
by hand, `schemathesis run URL/openapi.json --checks all -H "Authorization: Bearer ..."`, checks
the same) and a fixed seed."""

from __future__ import annotations

import tomllib
from collections import Counter
from dataclasses import dataclass, field

import httpx
import pytest
import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status, from_schema
from schemathesis.engine.events import FuzzScenarioFinished, NonFatalError, ScenarioFinished

from tests.api.conftest import serve
from tests.conftest import REPO


@pytest.fixture
def api_settings(settings):
    # A small text limit keeps Piper's share of the run short; live streams wait at most a minute.
    return settings.with_overrides(max_line_chars=300, api_rate_limit=0, live_start_timeout=60)


@dataclass
class Outcome:
    cases: int = 0
    statuses: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def load(url: str, key: str, *, seed: int, max_examples: int):
    """The published document with the repository's schemathesis.toml, every check on."""
    data = tomllib.loads((REPO / "schemathesis.toml").read_text())
    data |= {
        "seed": seed,
        "workers": 1,
        "headers": {"Authorization": f"Bearer {key}"},
        "generation": {"max-examples": max_examples},
        "suppress-health-check": ["all"],
    }
    data["checks"] = {"enabled": True, **data.get("checks", {})}
    return schemathesis.openapi.from_url(f"{url}/openapi.json", config=SchemathesisConfig.from_dict(data))


def fuzz(url: str, key: str, *, seed: int, max_examples: int) -> Outcome:
    """Every phase (examples, coverage, fuzzing, stateful) with every check; what it saw."""
    schema = load(url, key, seed=seed, max_examples=max_examples)
    outcome = Outcome()
    for event in from_schema(schema).execute():
        if isinstance(event, NonFatalError):
            outcome.errors.append(f"{event.label}: {event.info.format()}")
        if not isinstance(event, ScenarioFinished | FuzzScenarioFinished):
            continue
        recorder = event.recorder
        outcome.cases += len(recorder.cases)
        outcome.statuses.update(i.response.status_code for i in recorder.interactions.values() if i.response)
        outcome.failures += [
            f"{recorder.label}: {c.name}: {c.failure_info.failure.title}"
            for checks in recorder.checks.values()
            for c in checks
            if c.status == Status.FAILURE
        ]
    return outcome


def run(api_settings, redis_url, key: str, *, seed: int, max_examples: int) -> Outcome:
    with serve(api_settings, redis_url) as server:
        outcome = fuzz(server.url, key, seed=seed, max_examples=max_examples)
    print(f"{outcome.cases} cases, statuses {dict(sorted(outcome.statuses.items()))}")
    assert not outcome.errors, outcome.errors
    assert not outcome.failures, sorted(set(outcome.failures))
    assert not [s for s in outcome.statuses if s >= 500], outcome.statuses
    # The fuzzer got through: valid requests succeeded, invalid ones were refused.
    assert outcome.statuses[200] and outcome.statuses[201] and outcome.statuses[422] and outcome.statuses[404]
    return outcome


def test_the_document_states_errors_limits_and_audio_types(api_server):
    doc = httpx.get(f"{api_server.url}/openapi.json").json()
    operations = {f"{m.upper()} {p}": op for p, ops in doc["paths"].items() for m, op in ops.items()}
    secured = [op for op in operations.values() if op.get("security")]
    assert len(secured) >= 17 and all({"401", "429", "503"} <= op["responses"].keys() for op in secured)
    for label in ("POST /v1/batches", "POST /v1/batches/upload", "POST /v1/jobs", "POST /v1/audio/speech"):
        assert {"400", "409", "410", "413", "422"} <= operations[label]["responses"].keys(), label
    assert "400" in operations["GET /v1/batches/{batch_id}/items"]["responses"]
    assert set(operations["GET /v1/jobs/{job_id}/audio"]["responses"]["200"]["content"]) == {
        "audio/wav",
        "audio/mpeg",
        "audio/ogg",
        "audio/flac",
    }
    assert {"audio/wav", "audio/pcm"} <= set(operations["GET /v1/jobs/{job_id}/stream"]["responses"]["200"]["content"])
    speech_error = operations["POST /v1/audio/speech"]["responses"]["409"]["content"]["application/json"]["schema"]
    assert speech_error == {"$ref": "#/components/schemas/OpenAIError"}
    item = doc["components"]["schemas"]["ItemIn"]["properties"]
    assert item["text"]["maxLength"] == 300 and item["format"]["anyOf"][0]["enum"] == ["wav", "mp3", "ogg", "flac"]


def test_every_limit_is_stated_in_json_schema_words(api_server):
    """pydantic writes a Field's bounds as its own `ge`/`le` where a BeforeValidator comes first in
    an Annotated item: a client (and the fuzzer) then reads the integer as unbounded, and a value
    the document allows is refused with a 422."""
    doc = httpx.get(f"{api_server.url}/openapi.json").json()
    raw = []

    def walk(node, where: str) -> None:
        if isinstance(node, dict):
            raw.extend(
                f"{where}/{k}"
                for k, v in node.items()
                if k in {"ge", "le", "gt", "lt", "multiple_of"} and isinstance(v, int | float)
            )
            for k, v in node.items():
                walk(v, f"{where}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}/{i}")

    walk(doc, "")
    assert raw == []
    chapters = doc["components"]["schemas"]["RerenderIn"]["properties"]["chapters"]["items"]
    assert (chapters["minimum"], chapters["maximum"]) == (1, 9999)


def test_the_repository_config_switches_off_only_the_checks_it_names_where_it_names_them(api_server):
    schema = load(api_server.url, "unused", seed=1, max_examples=1)
    off = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        checks = schema.config.checks_config_for(operation=operation, phase="fuzzing")
        off[operation.label] = {
            name
            for name in ("negative_data_rejection", "ensure_resource_availability")
            if not checks.get_by_name(name=name).enabled
        }
    assert off["POST /v1/batches/upload"] == {"negative_data_rejection"}
    assert off["GET /v1/jobs/{job_id}"] == off["GET /v1/jobs/{job_id}/audio"] == {"ensure_resource_availability"}
    assert off["POST /v1/jobs"] == off["POST /v1/batches"] == off["POST /v1/audio/speech"] == set(), off


@pytest.mark.slow
def test_every_check_passes_on_every_operation(api_settings, redis_url, new_key, running_worker):
    assert run(api_settings, redis_url, new_key("fuzz"), seed=20261124, max_examples=8).cases > 500


@pytest.mark.slow
def test_every_check_passes_on_a_longer_run(api_settings, redis_url, new_key, running_worker):
    assert run(api_settings, redis_url, new_key("fuzz"), seed=7, max_examples=60).cases > 1000
