#!/usr/bin/env bash
set -euo pipefail
# Mark nodes as settled when they are popped from the heap (not when pushed)
# and relax an edge whenever it yields a shorter tentative distance.
"${PYTHON:-python3}" - <<'PY'
from pathlib import Path

p = Path("routing/planner.py")
src = p.read_text()
old = '''    visited = {source}
    counter = itertools.count()  # tie-breaker: nodes need not be comparable
    heap = [(0, next(counter), source)]
    while heap:
        d, _, node = heapq.heappop(heap)
        for nbr, weight in graph.neighbors(node):
            if nbr in visited:
                continue
            visited.add(nbr)
            dist[nbr] = d + weight
            prev[nbr] = node
            heapq.heappush(heap, (d + weight, next(counter), nbr))
'''
new = '''    visited: set[Hashable] = set()
    counter = itertools.count()  # tie-breaker: nodes need not be comparable
    heap = [(0, next(counter), source)]
    while heap:
        d, _, node = heapq.heappop(heap)
        if node in visited:
            continue  # stale heap entry; node already settled
        visited.add(node)
        for nbr, weight in graph.neighbors(node):
            if nbr in visited:
                continue
            candidate = d + weight
            if nbr not in dist or candidate < dist[nbr]:
                dist[nbr] = candidate
                prev[nbr] = node
                heapq.heappush(heap, (candidate, next(counter), nbr))
'''
assert old in src, "unexpected planner.py contents"
p.write_text(src.replace(old, new))
PY
