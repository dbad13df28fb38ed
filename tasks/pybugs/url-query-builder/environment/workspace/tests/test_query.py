from apiclient import ApiClient, build_query, build_url


def test_simple_params():
    assert build_query({"page": 2, "per_page": 50}) == "page=2&per_page=50"


def test_none_and_bool():
    assert build_query({"a": None, "archived": False, "x": True}) == "archived=false&x=true"


def test_empty():
    assert build_query({}) == ""
    assert build_url("https://h/x", None) == "https://h/x"


def test_existing_query():
    assert build_url("https://h/x?v=1", {"page": 3}) == "https://h/x?v=1&page=3"


def test_prepare_sets_auth_header():
    req = ApiClient("https://h/api/", token="t0k").prepare("get", "/items", params={"page": 1})
    assert req.full_url == "https://h/api/items?page=1"
    assert req.get_method() == "GET"
    assert req.get_header("Authorization") == "Bearer t0k"
