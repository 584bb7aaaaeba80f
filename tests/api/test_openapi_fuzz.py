"""Fuzz the published OpenAPI document with schemathesis: no request, however odd, gets a 5xx.
A real worker renders whatever the fuzzer's realtime jobs ask for."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from tests.api.conftest import serve


@pytest.fixture
def api_settings(settings):
    # A small text limit keeps Piper's share of the run short; live streams wait at most a minute.
    return settings.with_overrides(max_line_chars=300, api_rate_limit=0, live_start_timeout=60)


def test_no_server_errors(api_settings, redis_url, new_key, running_worker):
    """Every operation of the document, a dozen generated cases each (schemathesis's strategies driven
    by hypothesis directly: its pytest plugin does not load under this pytest)."""
    headers = {"Authorization": f"Bearer {new_key('fuzz')}"}
    with serve(api_settings, redis_url) as server:
        schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 16
        seen: dict[str, set[int]] = {}
        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(max_examples=12, deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck))
            def fuzz(case):
                response = case.call(base_url=server.url, headers=headers, timeout=120)
                seen.setdefault(operation.label, set()).add(response.status_code)
                case.validate_response(response, checks=[not_a_server_error])

            fuzz()
    # The fuzzer got through: valid requests succeeded somewhere, invalid ones were refused.
    assert any(c in seen["POST /v1/batches"] for c in (200, 201)), seen
    assert seen["POST /v1/batches"] & {400, 413, 422}, seen
    print({label: sorted(codes) for label, codes in seen.items()})
