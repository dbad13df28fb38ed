#!/usr/bin/env bash
# Reference fix: prune expired timestamps *before* deciding, in allow(),
# remaining() and retry_after(), so old calls actually leave the window.
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

path = Path("throttle/limiter.py")
src = path.read_text()

replacements = [
    (
        '''        hits = self._hits[key]
        if len(hits) >= self.max_calls:
            return False
        now = self._clock()
        self._prune(hits, now)
        hits.append(now)
        return True
''',
        '''        hits = self._hits[key]
        now = self._clock()
        self._prune(hits, now)
        if len(hits) >= self.max_calls:
            return False
        hits.append(now)
        return True
''',
    ),
    (
        '''        return max(0, self.max_calls - len(self._hits[key]))
''',
        '''        hits = self._hits[key]
        self._prune(hits, self._clock())
        return max(0, self.max_calls - len(hits))
''',
    ),
    (
        '''        hits = self._hits[key]
        if len(hits) < self.max_calls:
            return 0.0
        return max(0.0, hits[0] + self.period - self._clock())
''',
        '''        hits = self._hits[key]
        now = self._clock()
        self._prune(hits, now)
        if len(hits) < self.max_calls:
            return 0.0
        return max(0.0, hits[0] + self.period - now)
''',
    ),
]
for old, new in replacements:
    if new in src:
        continue
    assert old in src, "unexpected throttle/limiter.py"
    src = src.replace(old, new)
path.write_text(src)
PY
