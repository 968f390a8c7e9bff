"""Client transports that inject a fault into a real exchange with a broker."""

from __future__ import annotations

from collections.abc import Mapping

from broker.errors import BrokerUnavailable
from osqueue_spark.transport import Response, Urllib3Transport


class DropReplyOf:
    """A transport that sends the ``nth`` push (1: the first), lets it land, and
    raises as a dropped connection does (the urllib3 transport's error)."""

    def __init__(self, nth: int) -> None:
        self.inner = Urllib3Transport()
        self.nth, self.pushes = nth, 0

    def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None,
             timeout_s: float) -> Response:
        answer = self.inner.send(method, url, headers, body, timeout_s)
        if url.endswith("/push"):
            self.pushes += 1
            if self.pushes == self.nth:
                raise BrokerUnavailable(f"request to {url} failed after sending: "
                                        "ProtocolError (injected: reply dropped)")
        return answer

    def close(self) -> None:
        self.inner.close()
