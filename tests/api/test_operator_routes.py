"""/metrics stays bounded whatever methods and paths clients send."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

def samples(text: str) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_made_up_methods_and_unserved_paths_are_counted_under_one_label_each(api_server):
    with httpx.Client(base_url=api_server.url, timeout=30) as http:
        for i in range(40):
            assert http.request(f"ZZMETHOD{i}", "/healthz").status_code == 405
            assert http.request(f"ZZMETHOD{i}", f"/nothing-here-{i}").status_code == 404
        for i in range(10):
            assert http.get(f"/nothing-here-{i}").status_code == 404
        text = http.get("/metrics").text
    assert "ZZMETHOD" not in text and "nothing-here" not in text
    counted = samples(text)
    requests = "synth_api_requests_total"
    assert counted[(requests, (("method", "other"), ("route", "/healthz"), ("status", "405")))] == 40
    assert counted[(requests, (("method", "other"), ("route", "unmatched"), ("status", "404")))] == 40
    assert counted[(requests, (("method", "GET"), ("route", "unmatched"), ("status", "404")))] == 10
    methods = {dict(labels)["method"] for name, labels in counted if name == requests}
    assert methods == {"GET", "other"}
