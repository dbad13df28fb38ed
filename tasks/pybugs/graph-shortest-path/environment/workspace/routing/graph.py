"""A minimal weighted, directed graph."""

from __future__ import annotations

from collections.abc import Hashable, Iterator


class Graph:
    """Adjacency-list graph with non-negative edge weights.

    Nodes can be any hashable value; they are created implicitly when an
    edge mentions them.
    """

    def __init__(self) -> None:
        self._adj: dict[Hashable, dict[Hashable, float]] = {}

    def add_node(self, node: Hashable) -> None:
        """Add ``node`` without any edges (no-op if it already exists)."""
        self._adj.setdefault(node, {})

    def add_edge(self, a: Hashable, b: Hashable, weight: float) -> None:
        """Add a one-way edge ``a -> b``.

        Adding the same edge twice keeps the cheaper weight.
        """
        if weight < 0:
            raise ValueError(f"negative weight {weight!r} on edge {a!r} -> {b!r}")
        self.add_node(a)
        self.add_node(b)
        current = self._adj[a].get(b)
        if current is None or weight < current:
            self._adj[a][b] = weight

    def add_road(self, a: Hashable, b: Hashable, weight: float) -> None:
        """Add a two-way edge between ``a`` and ``b``."""
        self.add_edge(a, b, weight)
        self.add_edge(b, a, weight)

    def neighbors(self, node: Hashable) -> Iterator[tuple[Hashable, float]]:
        """Yield ``(neighbor, weight)`` pairs for the edges leaving ``node``."""
        yield from self._adj.get(node, {}).items()

    def __contains__(self, node: object) -> bool:
        return node in self._adj

    def __len__(self) -> int:
        return len(self._adj)

    def nodes(self) -> list[Hashable]:
        """Return all nodes in insertion order."""
        return list(self._adj)
