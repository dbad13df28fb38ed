import json

from confkit import Config, deep_merge, load


def test_deep_merge_nested():
    base = {"db": {"host": "localhost", "port": 5432}, "debug": False}
    override = {"db": {"host": "db.internal"}, "debug": True}
    merged = deep_merge(base, override)
    assert merged == {"db": {"host": "db.internal", "port": 5432}, "debug": True}
    assert base["db"]["host"] == "localhost"  # inputs are untouched


def test_deep_merge_replaces_lists():
    assert deep_merge({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}


def test_load_merges_files(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"x": 1, "y": {"z": 2}}))
    (tmp_path / "b.json").write_text(json.dumps({"y": {"w": 3}}))
    cfg = load(tmp_path / "a.json", tmp_path / "b.json")
    assert isinstance(cfg, Config)
    assert cfg.data == {"x": 1, "y": {"z": 2, "w": 3}}
    assert sorted(cfg.keys()) == ["x", "y"]
