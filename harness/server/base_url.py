"""A model server's base URL as the OpenAI client needs it: checked (the eval's --base-url, a judge's
URL) and put in its one form. Standard library only: the config layer imports it."""


def check_base_url(url: str) -> str:
    """``url`` when the OpenAI client can use it as a base URL; else ValueError saying what to
    give. The client joins ``/chat/completions`` to the path and drops a query string or a
    fragment, so ``?token=`` would fail every request with a 404 and no word of why."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1")
    if parts.query or parts.fragment:
        raise ValueError(
            f"{url!r} has a query string or fragment, which the OpenAI client drops from every request; "
            "give the server's base URL alone (an API key goes in --api-key)"
        )
    path = parts.path.rstrip("/")
    if "/v1/" in path + "/" and not path.endswith("/v1"):
        raise ValueError(
            f"{url!r} goes past the API's base: give the URL that ends in /v1 (the client adds "
            "/chat/completions itself)"
        )
    return url


def openai_url(base_url: str) -> str:
    """``base_url`` with ``/v1`` at its end exactly once (users pass either form)."""
    url = base_url.rstrip("/")
    return url if url.endswith("/v1") else f"{url}/v1"


__all__ = ["check_base_url", "openai_url"]
