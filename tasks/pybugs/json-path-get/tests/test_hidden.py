import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import pytest

from confkit import Config, get_path

DATA = {
    "a": {"b": [10, 20, {"c": "found"}]},
    "matrix": [[1, 2], [3, 4]],
    "flags": {"debug": False, "retries": 0, "label": "", "owner": None, "tags": []},
    "servers": [
        {"host": "alpha", "ports": [80, 443]},
        {"host": "beta", "ports": [8080]},
    ],
    "ports": {"0": "zero-key"},
    "http-server": {"max connections": 100},
    "name": "abc",
}


def test_basic_dotted_and_indexed_paths():
    assert plain(get_path(DATA, "a.b[2].c")) == "found"
    assert plain(get_path(DATA, "a.b[0]")) == 10
    assert plain(get_path(DATA, "a.b")) == [10, 20, {"c": "found"}]
    assert plain(get_path(DATA, "servers[1].host")) == "beta"
    assert plain(get_path(DATA, "servers[0].ports[1]")) == 443


def test_chained_and_leading_indexes():
    assert plain(get_path(DATA, "matrix[1][0]")) == 3
    assert plain(get_path(DATA["matrix"], "[0][1]")) == 2
    assert plain(get_path(DATA["servers"], "[1].ports[0]")) == 8080


def test_empty_path_returns_data():
    assert get_path(DATA, "") is DATA


def test_missing_returns_default():
    sentinel = object()
    assert get_path(DATA, "a.x.y") is None
    assert plain(get_path(DATA, "a.x.y", default="n/a")) == "n/a"
    assert get_path(DATA, "nope", sentinel) is sentinel
    assert get_path(DATA, "a.b[7]", default=sentinel) is sentinel
    assert get_path(DATA, "servers[2].host", default=sentinel) is sentinel
    assert get_path(DATA, "matrix[0][5]", default=sentinel) is sentinel


def test_type_mismatches_return_default():
    sentinel = object()
    assert get_path(DATA, "a[0]", default=sentinel) is sentinel  # index on a dict
    assert get_path(DATA, "matrix.x", default=sentinel) is sentinel  # key on a list
    assert get_path(DATA, "a.b[0].c", default=sentinel) is sentinel  # into an int
    assert get_path(DATA, "a.b[2].c.d", default=sentinel) is sentinel  # into a str
    assert get_path(DATA, "name[0]", default=sentinel) is sentinel  # strings are values
    assert get_path(DATA, "flags.owner.x", default=sentinel) is sentinel  # into None
    assert get_path(DATA, "matrix.0", default=sentinel) is sentinel  # dotted part != index


def test_numeric_looking_and_unusual_keys():
    assert plain(get_path(DATA, "ports.0")) == "zero-key"
    assert plain(get_path(DATA, "http-server.max connections")) == 100


def test_falsy_values_are_returned():
    assert get_path(DATA, "flags.debug", default=True) is False
    assert plain(get_path(DATA, "flags.retries", default=5)) == 0
    assert plain(get_path(DATA, "flags.label", default="x")) == ""
    assert get_path(DATA, "flags.owner", default="x") is None
    assert plain(get_path(DATA, "flags.tags", default="x")) == []


def test_config_get_and_require():
    cfg = Config(DATA)
    assert plain(cfg.get("servers[0].host")) == "alpha"
    assert plain(cfg.get("servers[9].host", default="localhost")) == "localhost"
    assert plain(cfg.require("flags.retries")) == 0
    assert cfg.require("flags.owner") is None
    with pytest.raises(KeyError):
        cfg.require("a.b[3]")
