"""Parse durations such as "1h30m" or "45s" into seconds."""

import re

_UNITS = {"h": 3600, "m": 3600, "s": 1}
_PART = re.compile(r"(\d+)([hms])")


def parse_duration(text):
    """Seconds in a duration like "2h", "1h30m" or "90s"."""
    parts = _PART.findall(text.strip().lower())
    if not parts or "".join(n + u for n, u in parts) != text.strip().lower():
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)
