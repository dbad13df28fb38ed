import pytest

from routing import Graph, NoRouteError, distances_from, shortest_path


def make_line():
    g = Graph()
    g.add_road("a", "b", 1)
    g.add_road("b", "c", 2)
    g.add_road("c", "d", 3)
    return g


def test_line_distances():
    assert distances_from(make_line(), "a") == {"a": 0, "b": 1, "c": 3, "d": 6}


def test_line_path():
    assert shortest_path(make_line(), "d", "a") == (6, ["d", "c", "b", "a"])


def test_unreachable():
    g = make_line()
    g.add_node("island")
    with pytest.raises(NoRouteError):
        shortest_path(g, "a", "island")


def test_negative_weight_rejected():
    with pytest.raises(ValueError):
        Graph().add_edge("a", "b", -1)
