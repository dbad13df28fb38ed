import os
import sys

from harness_checks import plain  # before the tested code: its own, whatever that imports

sys.path.append(os.environ.get("WORKSPACE", "."))  # after the standard library: never shadows it

from urllib.parse import parse_qsl, urlsplit  # noqa: E402

from apiclient import ApiClient, build_query, build_url  # noqa: E402


def pairs(query):
    return parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))


def assert_safe(query):
    assert plain(query.isascii()), query
    for ch in " #\n\t\"<>":
        assert plain(ch) not in query, f"unencoded {ch!r} in {query!r}"


def test_issue_example():
    q = build_query({"q": "desk lamp & shade", "tag": ["new", "sale"], "page": 1})
    assert_safe(q)
    assert plain(pairs(q)) == [
        ("q", "desk lamp & shade"),
        ("tag", "new"),
        ("tag", "sale"),
        ("page", "1"),
    ]


def test_exact_encoding_of_reserved_characters():
    assert plain(build_query({"q": "a&b", "tag": ["x", "y"]})) == "q=a%26b&tag=x&tag=y"
    assert plain(build_query({"expr": "a+b=c"})) == "expr=a%2Bb%3Dc"


def test_special_characters_round_trip():
    params = {
        "plus": "1+1",
        "pct": "50%",
        "hash": "x#y",
        "accent": "café ☕",
        "path": "/docs?x=1",
        "empty": "",
    }
    q = build_query(params)
    assert_safe(q)
    assert plain(pairs(q)) == plain(list(params.items()))


def test_keys_are_encoded_too():
    q = build_query({"filter[name]": "Zoë", "sort by": "date", "a&b": "c"})
    assert_safe(q)
    assert plain(pairs(q)) == [("filter[name]", "Zoë"), ("sort by", "date"), ("a&b", "c")]


def test_sequences_repeat_the_key():
    q = build_query({"ids": (1, 2, 3), "flags": [True, None, False], "tag": []})
    assert plain(pairs(q)) == [
        ("ids", "1"),
        ("ids", "2"),
        ("ids", "3"),
        ("flags", "true"),
        ("flags", "false"),
    ]
    q = build_query({"a": 1, "tag": ["x y", "z&w"], "b": None, "c": 2})
    assert_safe(q)
    assert plain(pairs(q)) == [("a", "1"), ("tag", "x y"), ("tag", "z&w"), ("c", "2")]


def test_existing_behaviour_kept():
    assert plain(build_query({"page": 2, "per_page": 50})) == "page=2&per_page=50"
    assert plain(build_query({"a": None, "archived": False})) == "archived=false"
    assert plain(build_query({})) == ""
    assert plain(build_query({"tag": []})) == ""
    assert plain(build_url("https://h/x", {"a": None})) == "https://h/x"


def test_build_url_with_existing_query():
    url = build_url("https://h/search?v=1", {"q": "a&b c", "tag": ["x", "y"]})
    parts = urlsplit(url)
    assert plain((parts.scheme, parts.netloc, parts.path)) == ("https", "h", "/search")
    assert plain(parts.fragment) == ""
    assert plain(pairs(parts.query)) == [("v", "1"), ("q", "a&b c"), ("tag", "x"), ("tag", "y")]


def test_client_prepare_encodes_params():
    req = ApiClient("https://api.example.com/v1").prepare(
        "GET", "/search", params={"q": "lamp #2", "tag": ["new", "sale"]}
    )
    parts = urlsplit(req.full_url)
    assert plain(parts.path) == "/v1/search"
    assert plain(parts.fragment) == ""
    assert plain(pairs(parts.query)) == [("q", "lamp #2"), ("tag", "new"), ("tag", "sale")]
