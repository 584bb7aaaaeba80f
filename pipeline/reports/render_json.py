"""A report as JSON: Report.to_dict, pretty-printed."""

from __future__ import annotations

import json

from pipeline.reports.model import Report


def render_json(r: Report) -> str:
    return json.dumps(r.to_dict(), indent=2, sort_keys=False)
