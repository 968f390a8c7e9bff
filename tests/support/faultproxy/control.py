"""The control endpoint of a :class:`~tests.support.faultproxy.proxy.FaultProxy`
running in another process (see the proxy's docstring for the endpoint)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from tests.support.faultproxy.proxy import CONTROL_PREFIX


class RemoteControl:
    """The control endpoint of a proxy running elsewhere (another process)."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _call(self, method: str, action: str, body: dict[str, Any] | None = None
              ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{CONTROL_PREFIX}{action}", data=data,
                                     method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            out: dict[str, Any] = json.loads(resp.read())
            return out

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "stats")

    def heal(self) -> dict[str, Any]:
        return self._call("POST", "heal", {})

    def set_enabled(self, enabled: bool) -> dict[str, Any]:
        return self._call("POST", "break" if enabled else "heal", {})

    def configure(self, **changes: Any) -> dict[str, Any]:
        return self._call("POST", "config", changes)

    def storm(self, kinds: list[str], **bounds: Any) -> dict[str, Any]:
        """See :meth:`~tests.support.faultproxy.proxy.FaultProxy.storm` (``seconds``,
        ``count``, ``methods``)."""
        return self._call("POST", "storm", {"kinds": kinds, **bounds})

    def reset_counts(self) -> dict[str, Any]:
        return self._call("POST", "reset", {})
