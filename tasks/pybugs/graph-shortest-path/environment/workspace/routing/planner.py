"""Shortest-path queries (Dijkstra's algorithm)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable

from .graph import Graph


class NoRouteError(LookupError):
    """Raised when the target node cannot be reached from the source."""


def _dijkstra(
    graph: Graph, source: Hashable
) -> tuple[dict[Hashable, float], dict[Hashable, Hashable]]:
    """Run Dijkstra from ``source``.

    Returns ``(dist, prev)`` where ``dist[n]`` is the length of the shortest
    path to ``n`` and ``prev[n]`` is the node before ``n`` on that path.
    """
    if source not in graph:
        raise KeyError(source)
    dist: dict[Hashable, float] = {source: 0}
    prev: dict[Hashable, Hashable] = {}
    visited = {source}
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
    return dist, prev


def distances_from(graph: Graph, source: Hashable) -> dict[Hashable, float]:
    """Return the shortest distance from ``source`` to every reachable node."""
    dist, _ = _dijkstra(graph, source)
    return dist


def shortest_path(
    graph: Graph, source: Hashable, target: Hashable
) -> tuple[float, list[Hashable]]:
    """Return ``(distance, path)`` of a shortest route from source to target.

    ``path`` starts with ``source`` and ends with ``target``.  Raises
    :class:`NoRouteError` if ``target`` is unreachable.
    """
    dist, prev = _dijkstra(graph, source)
    if target not in dist:
        raise NoRouteError(f"no route from {source!r} to {target!r}")
    path = [target]
    while path[-1] != source:
        path.append(prev[path[-1]])
    path.reverse()
    return dist[target], path
