#!/usr/bin/env bash
set -euo pipefail
"${PYTHON:-python3}" - <<'PY'
import pathlib

path = pathlib.Path("jobq/scheduler.py")
src = path.read_text()

replacements = [
    ("import heapq\n", "import heapq\nimport itertools\n"),
    (
        "        self._heap: List[Tuple[int, Job]] = []\n",
        "        self._heap: List[Tuple[int, int, Job]] = []\n"
        "        # Monotonic tie-breaker: equal priorities pop in submission order\n"
        "        # and Job objects themselves are never compared.\n"
        "        self._counter = itertools.count()\n",
    ),
    (
        "        heapq.heappush(self._heap, (-job.priority, job))\n",
        "        heapq.heappush(self._heap, (-job.priority, next(self._counter), job))\n",
    ),
]
for old, new in replacements:
    assert old in src, f"pattern not found: {old!r}"
    src = src.replace(old, new, 1)
path.write_text(src)
PY
