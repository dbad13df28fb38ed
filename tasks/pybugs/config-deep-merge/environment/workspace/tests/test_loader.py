from appsettings import DEFAULTS, load_settings, merge_settings


def test_defaults_without_user_config():
    settings = load_settings()
    assert settings == DEFAULTS
    assert settings is not DEFAULTS


def test_top_level_override():
    settings = load_settings(overrides={"debug": True})
    assert settings["debug"] is True
    assert settings["database"]["host"] == "localhost"


def test_merge_adds_new_keys():
    assert merge_settings({"a": 1}, {"b": 2}) == {"a": 1, "b": 2}


def test_toml_file(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text('debug = true\n')
    assert load_settings(path)["debug"] is True
