import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

import copy

from appsettings import DEFAULTS, load_settings, merge_settings


def test_nested_dicts_are_merged():
    base = {"db": {"host": "a", "port": 1}, "debug": False}
    assert plain(merge_settings(base, {"db": {"port": 2}})) == {
        "db": {"host": "a", "port": 2},
        "debug": False,
    }


def test_merge_at_any_depth():
    base = {"a": {"b": {"c": {"d": 1, "e": 2}, "f": 3}, "g": 4}}
    override = {"a": {"b": {"c": {"e": 20, "x": 9}}}}
    assert plain(merge_settings(base, override)) == {
        "a": {"b": {"c": {"d": 1, "e": 20, "x": 9}, "f": 3}, "g": 4}
    }


def test_lists_and_scalars_are_replaced():
    base = {"logging": {"handlers": ["console"], "level": "INFO"}, "x": {"y": 1}, "z": 5}
    override = {"logging": {"handlers": ["file"]}, "x": "flat", "z": {"now": "a dict"}}
    assert plain(merge_settings(base, override)) == {
        "logging": {"handlers": ["file"], "level": "INFO"},
        "x": "flat",
        "z": {"now": "a dict"},
    }


def test_empty_and_new_sections():
    base = {"database": {"host": "h", "port": 1}}
    assert plain(merge_settings(base, {"database": {}})) == plain(base)
    assert plain(merge_settings(base, {"cache": {"ttl": 5}})) == {
        "database": {"host": "h", "port": 1},
        "cache": {"ttl": 5},
    }
    assert plain(merge_settings({}, {})) == {}


def test_inputs_not_modified():
    base = {"db": {"host": "a", "pool": {"min": 1, "max": 2}}, "tags": ["x"]}
    override = {"db": {"pool": {"max": 5}, "user": "u"}, "tags": ["y"]}
    base_before, override_before = copy.deepcopy(base), copy.deepcopy(override)
    result = merge_settings(base, override)
    assert plain(base) == plain(base_before)
    assert plain(override) == plain(override_before)
    assert plain(result) == {
        "db": {"host": "a", "pool": {"min": 1, "max": 5}, "user": "u"},
        "tags": ["y"],
    }


def test_load_settings_from_toml(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text("[database]\nport = 6543\n\n[database.pool]\nmax_size = 50\n")
    settings = load_settings(path)
    assert plain(settings["database"]) == {
        "host": "localhost",
        "port": 6543,
        "name": "app",
        "pool": {"min_size": 1, "max_size": 50, "timeout_s": 30},
    }
    assert plain(settings["logging"]) == plain(DEFAULTS["logging"])
    assert settings["debug"] is False


def test_load_settings_file_then_overrides(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text('[logging]\nlevel = "DEBUG"\nhandlers = ["file"]\n\n[features]\nbeta = true\n')
    settings = load_settings(path, overrides={"logging": {"level": "WARNING"}, "features": {"gamma": 1}})
    assert plain(settings["logging"]) == plain({
        "level": "WARNING",
        "handlers": ["file"],
        "format": DEFAULTS["logging"]["format"],
    })
    assert plain(settings["features"]) == {"beta": True, "gamma": 1}
    assert plain(settings["database"]["host"]) == "localhost"


def test_defaults_never_change():
    snapshot = copy.deepcopy(DEFAULTS)
    first = load_settings(overrides={"database": {"pool": {"max_size": 99}}, "features": {"a": 1}})
    assert plain(first["database"]["pool"]) == {"min_size": 1, "max_size": 99, "timeout_s": 30}
    first["database"]["pool"]["min_size"] = -1
    first["logging"]["handlers"].append("oops")
    assert plain(DEFAULTS) == plain(snapshot)
    assert plain(load_settings()) == plain(snapshot)
