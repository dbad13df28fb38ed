"""A minimal API client built on :mod:`urllib.request`."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping
from typing import Any

from .query import build_url


class ApiClient:
    """Client for one API root, e.g. ``https://api.example.com/v1``."""

    def __init__(self, root: str, token: str | None = None, timeout: float = 10.0):
        self.root = root.rstrip("/")
        self.token = token
        self.timeout = timeout

    def url(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        """Return the absolute URL for ``path`` with ``params`` appended."""
        return build_url(f"{self.root}/{path.lstrip('/')}", params)

    def prepare(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> urllib.request.Request:
        """Build (but do not send) a request."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return urllib.request.Request(
            self.url(path, params), data=data, headers=headers, method=method.upper()
        )

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send a request and decode the JSON response body."""
        req = self.prepare(method, path, **kwargs)
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            payload = resp.read()
        return json.loads(payload) if payload else None
