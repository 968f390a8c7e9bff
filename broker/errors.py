"""Every error osqueue raises, under one root.

Each class has a stable ``code`` string (used in HTTP error bodies and logs)
and an HTTP ``status``. All of them pickle, because Spark moves exceptions
between the driver and executor processes.

Tree::

    OsqueueError                      code              status
    ├── StorageError                  storage_error     503
    │   ├── NotFound                  not_found         404
    │   ├── Conflict                  conflict          409
    │   ├── StorageUnavailable        storage_unavailable 503  retryable
    │   ├── StorageRefused            storage_refused   502
    │   └── UnsafeStore               unsafe_store      500
    ├── OutcomeUnknown                outcome_unknown   503  retryable
    ├── StateError                    state_error       500
    │   ├── CorruptState              corrupt_state     500
    │   ├── ForeignState              foreign_state     500
    │   ├── NewerState                newer_state       500
    │   └── SegmentMissing            segment_missing   500
    ├── RequestError                  bad_request       400
    │   ├── InvalidRequest            invalid_request   422
    │   │   └── RequestKeyReused      request_key_reused 422
    │   ├── PayloadTooLarge           payload_too_large 413
    │   ├── HeadersTooLarge           headers_too_large 431
    │   ├── RequestTimeout            request_timeout   408
    │   ├── MethodNotAllowed          method_not_allowed 405
    │   ├── Unauthorized              unauthorized      401
    │   ├── Forbidden                 forbidden         403
    │   └── UnsupportedMediaType      unsupported_media_type 415
    ├── UnknownQueue                  unknown_queue     404
    ├── StaleToken                    stale_token       409
    ├── TooManyRequests               too_many_requests 429  retryable
    ├── QueueFull                     queue_full        503
    ├── NotTheBroker                  not_the_broker    503  retryable
    └── BrokerUnavailable             broker_unavailable 503  retryable
        └── BrokerUnreachable         broker_unreachable 503  retryable

``retryable`` (a class attribute) says whether repeating the same call may
succeed: the client retries exactly those errors, and only for operations
that are idempotent (every operation is, see :mod:`osqueue_spark.client`).

Messages never contain credentials: store URLs are shown without any
user-info part and tokens are never echoed. A message that quotes a caller's
value quotes it through :func:`shown`: a short prefix, never the whole of it.
"""

from __future__ import annotations

import reprlib
from typing import Any, ClassVar

#: The most characters of a caller's value an error message quotes.
SHOWN_CHARS = 60



class _Prefix(reprlib.Repr):
    """reprlib, but a long string shows its start (reprlib keeps both ends)."""

    def repr_str(self, x: str, level: int) -> str:
        return repr(x[:self.maxstring]) + ("..." if len(x) > self.maxstring else "")


_REPR = _Prefix()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = SHOWN_CHARS
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = _REPR.maxset = 4
_REPR.maxlevel = 2


def shown(value: Any) -> str:
    """``value`` as an error message may quote it: its repr, at most about
    :data:`SHOWN_CHARS` characters (a longer one is cut and ends in ``...``).
    Costs no more than the prefix it shows, whatever the value's size."""
    text = _REPR.repr(value)
    return text if len(text) <= SHOWN_CHARS + 5 else text[:SHOWN_CHARS] + "..."


def _rebuild(cls: type[OsqueueError], message: str, details: dict[str, Any]) -> OsqueueError:
    return cls(message, **details)


class OsqueueError(Exception):
    """Root of every osqueue error.

    ``details`` are extra JSON-safe fields (for example ``url`` on
    :class:`NotTheBroker`) carried in HTTP error bodies and kept when pickled.
    """

    code: ClassVar[str] = "osqueue_error"
    status: ClassVar[int] = 500
    #: True if repeating the call may succeed (a transient condition).
    retryable: ClassVar[bool] = False

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.details))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def to_dict(self) -> dict[str, Any]:
        """The JSON error body: ``{"error": message, "code": code, ...details}``."""
        return {"error": self.message, "code": self.code, **self.details}

    @property
    def request_key(self) -> str | None:
        """The request key of the push this error ended (``details['request_key']``:
        ``QueueClient.push_many`` puts it on a retryable error, to repeat the push
        with), else None."""
        key = self.details.get("request_key")
        return key if isinstance(key, str) else None


class StorageError(OsqueueError):
    code = "storage_error"
    status = 503


class NotFound(StorageError):
    code = "not_found"
    status = 404


class Conflict(StorageError):
    """A conditional write lost: the object changed (or exists) since it was read."""

    code = "conflict"
    status = 409


class StorageUnavailable(StorageError):
    """Transient failure or timeout: the outcome of a write is unknown."""

    code = "storage_unavailable"
    status = 503
    retryable = True


class StorageRefused(StorageError):
    """The store refused the request for good (403 access denied, 400 bad request):
    retrying will not help; nothing was written."""

    code = "storage_refused"
    status = 502


class UnsafeStore(StorageError):
    """The store does not honour conditional writes; running on it would lose jobs."""

    code = "unsafe_store"
    status = 500


class OutcomeUnknown(OsqueueError):
    """A write that carried this call may or may not have landed, and the broker
    could not find out (storage kept failing, or another broker wrote on top of
    it). Nothing was undone: repeat the call, which is idempotent, to learn the
    answer."""

    code = "outcome_unknown"
    status = 503
    retryable = True


class StateError(OsqueueError):
    code = "state_error"
    status = 500


class CorruptState(StateError):
    code = "corrupt_state"


class ForeignState(StateError):
    code = "foreign_state"


class NewerState(StateError):
    code = "newer_state"


class SegmentMissing(StateError):
    """The queue's object references a segment object that is missing, or whose
    etag differs from the one the reference holds (it was replaced or deleted
    behind the broker's back). The message names the object; nothing was
    changed, and no job of it was skipped."""

    code = "segment_missing"


class RequestError(OsqueueError):
    code = "bad_request"
    status = 400


class InvalidRequest(RequestError):
    code = "invalid_request"
    status = 422


class RequestKeyReused(InvalidRequest):
    """A push under a request key whose receipt holds other jobs (a key reused for
    new work): nothing was pushed. 422 as for any request that cannot be applied
    as sent, the status the IETF ``Idempotency-Key`` draft gives a key reused with
    another payload; an ``InvalidRequest``, so code that catches those catches it."""

    code = "request_key_reused"


class PayloadTooLarge(RequestError):
    code = "payload_too_large"
    status = 413


class HeadersTooLarge(RequestError):
    """The request line and headers exceed the server's limit (the connection is closed)."""

    code = "headers_too_large"
    status = 431


class RequestTimeout(RequestError):
    """The client stalled while sending its headers or body (the connection is closed)."""

    code = "request_timeout"
    status = 408


class MethodNotAllowed(RequestError):
    code = "method_not_allowed"
    status = 405


class Unauthorized(RequestError):
    code = "unauthorized"
    status = 401


class Forbidden(RequestError):
    """A request a web page may have sent (a foreign ``Origin``, ``Sec-Fetch-Site``
    other than ``same-origin``), or one addressed to a host name a broker without
    a token does not answer to (DNS rebinding); see ``docs/security.md``."""

    code = "forbidden"
    status = 403


class UnsupportedMediaType(RequestError):
    """A state-changing request without the JSON (or staged-lines) content type its
    route takes: a web page cannot send one without a CORS preflight."""

    code = "unsupported_media_type"
    status = 415


class UnknownQueue(OsqueueError):
    code = "unknown_queue"
    status = 404


class JobNotFound(OsqueueError):
    """No job has that id in the queue, its segments or its archive."""

    code = "job_not_found"
    status = 404


class StaleToken(OsqueueError):
    code = "stale_token"
    status = 409


class TooManyRequests(OsqueueError):
    """The client's address presented too many wrong tokens: every request of it
    that carries a token is refused until ``details['retry_after_s']`` (whole
    seconds, also the ``Retry-After`` header) have passed; nothing was applied."""

    code = "too_many_requests"
    status = 429
    retryable = True


class QueueFull(OsqueueError):
    code = "queue_full"
    status = 503


class NotTheBroker(OsqueueError):
    """This broker no longer owns the queue; ``details['url']`` names the one that does."""

    code = "not_the_broker"
    status = 503
    retryable = True


class BrokerUnavailable(OsqueueError):
    """Try again: the broker is shutting down or no longer active, or (raised by
    the client) a call failed in transit and may or may not have been applied."""

    code = "broker_unavailable"
    status = 503
    retryable = True


class BrokerUnreachable(BrokerUnavailable):
    """A call never reached a broker (no connection could be made): nothing was
    applied."""

    code = "broker_unreachable"


class TlsFailed(BrokerUnreachable):
    """A TLS connection to the broker could not be made (it speaks plain HTTP,
    or its certificate was refused): nothing was sent, and trying again would
    fail the same way."""

    code = "tls_failed"
    retryable = False


ERRORS_BY_CODE: dict[str, type[OsqueueError]] = {}


def _index(cls: type[OsqueueError]) -> None:
    ERRORS_BY_CODE[cls.code] = cls
    for sub in cls.__subclasses__():
        _index(sub)


_index(OsqueueError)


def from_dict(body: dict[str, Any], status: int = 500) -> OsqueueError:
    """Rebuild an error from an HTTP error body (unknown codes become the root)."""
    body = dict(body)
    message = str(body.pop("error", f"HTTP {status}"))
    code = str(body.pop("code", ""))
    cls = ERRORS_BY_CODE.get(code, OsqueueError)
    return cls(message, **body)
