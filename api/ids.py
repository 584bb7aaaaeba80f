"""What a resource id can look like. Ids are uuid4 hex (pipeline.db.models.new_id); anything else,
a NUL byte or a surrogate among it, names nothing, and is answered as such (404) before a database
that refuses such text is asked."""

from __future__ import annotations

import re

_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")


def could_exist(value: object) -> bool:
    return isinstance(value, str) and _ID.fullmatch(value) is not None
