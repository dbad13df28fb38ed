import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import pytest  # noqa: E402

from routing import Graph, NoRouteError, distances_from, shortest_path  # noqa: E402


def path_cost(graph, path):
    total = 0
    for a, b in zip(path, path[1:]):
        weights = dict(graph.neighbors(a))
        assert plain(b) in weights, f"{a!r} -> {b!r} is not an edge"
        total += weights[b]
    return total


def test_cheaper_detour_is_preferred():
    g = Graph()
    g.add_edge("A", "B", 10)
    g.add_edge("A", "C", 1)
    g.add_edge("C", "B", 1)
    assert plain(distances_from(g, "A")) == {"A": 0, "B": 2, "C": 1}
    assert plain(shortest_path(g, "A", "B")) == (2, ["A", "C", "B"])


def test_issue_example_city_network():
    g = Graph()
    g.add_road("depot", "market", 7)
    g.add_road("depot", "school", 9)
    g.add_road("depot", "park", 14)
    g.add_road("market", "school", 10)
    g.add_road("market", "mill", 15)
    g.add_road("school", "mill", 11)
    g.add_road("school", "park", 2)
    g.add_road("park", "harbour", 9)
    g.add_road("mill", "harbour", 6)
    assert plain(distances_from(g, "depot")) == {
        "depot": 0,
        "market": 7,
        "school": 9,
        "park": 11,
        "mill": 20,
        "harbour": 20,
    }
    distance, path = shortest_path(g, "depot", "harbour")
    assert plain(distance) == 20
    assert plain(path) == ["depot", "school", "park", "harbour"]


def test_long_chain_beats_direct_edge():
    g = Graph()
    for i in range(10):
        g.add_edge(i, i + 1, 1)
    g.add_edge(0, 10, 50)
    g.add_edge(0, 5, 6)
    dist = distances_from(g, 0)
    assert plain(dist) == plain({i: i for i in range(11)})
    distance, path = shortest_path(g, 0, 10)
    assert plain(distance) == 10
    assert plain(path) == plain(list(range(11)))


def test_path_is_consistent_with_distance_on_dense_graph():
    # deterministic pseudo-random graph; compare against Bellman-Ford
    g = Graph()
    n = 25
    seed = 12345
    edges = []
    for a in range(n):
        for b in range(n):
            seed = (seed * 1103515245 + 12345) % (2**31)
            if a != b and seed % 4 == 0:
                w = (seed >> 8) % 20 + 1
                g.add_edge(a, b, w)
                edges.append((a, b, w))
    ref = {0: 0}
    for _ in range(n):
        for a, b, w in edges:
            if a in ref and ref[a] + w < ref.get(b, float("inf")):
                ref[b] = ref[a] + w
    assert plain(distances_from(g, 0)) == plain(ref)
    for target, expected in ref.items():
        distance, path = shortest_path(g, 0, target)
        assert plain(distance) == plain(expected)
        assert plain(path[0]) == 0 and plain(path[-1]) == plain(target)
        assert plain(path_cost(g, path)) == plain(expected)


def test_source_equals_target_and_unreachable():
    g = Graph()
    g.add_edge("x", "y", 3)
    g.add_node("z")
    assert plain(shortest_path(g, "x", "x")) == (0, ["x"])
    with pytest.raises(NoRouteError):
        shortest_path(g, "y", "x")  # one-way edge
    with pytest.raises(NoRouteError):
        shortest_path(g, "x", "z")


def test_zero_weight_edges():
    g = Graph()
    g.add_edge("s", "a", 5)
    g.add_edge("s", "b", 0)
    g.add_edge("b", "c", 0)
    g.add_edge("c", "a", 1)
    assert plain(distances_from(g, "s")) == {"s": 0, "a": 1, "b": 0, "c": 0}
    assert plain(shortest_path(g, "s", "a")) == (1, ["s", "b", "c", "a"])
