"""The standalone broker's flags (:class:`BrokerFlags`): command-line flags over ``OSQUEUE_*``
variables, which become a :class:`~broker.service.config.BrokerConfig`.

Every flag of ``osqueue-broker`` (:mod:`broker.cli`) can also come from the
environment: ``--lease-s`` from ``OSQUEUE_LEASE_S``, ``--store`` from
``OSQUEUE_STORE`` and so on (``--no-self-test`` is ``OSQUEUE_SELF_TEST=false``).
A flag wins over its variable. The bearer token comes from ``OSQUEUE_TOKEN``,
or from the variable ``--token-env`` names; it is a ``SecretStr``, so no repr,
log line or error message shows it.

A broker that listens beyond loopback (``--listen 0.0.0.0:8765``, or any
address that is not ``127.x`` / ``::1`` / ``localhost``) needs a token: it
refuses to start without one unless ``--insecure-no-token``
(``OSQUEUE_INSECURE_NO_TOKEN=true``) says that the network itself is trusted.
``--advertise-url`` is the URL the broker writes into every queue object it
owns, from which clients (``store=`` option) and other brokers find the owner:
give it when the listening address is not what other machines reach (a
wildcard address, a container, a proxy).

:meth:`BrokerFlags.load` raises ``pydantic.ValidationError`` for bad values;
:func:`problems` words each as one line naming the flag and its variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from broker.http.peers import parse_networks
from broker.http.server import advertise_url_problem, is_loopback
from broker.limits import (
    BROKER_LEASE_S,
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_COMMIT_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_STARTUP_TIMEOUT_S,
    DEFAULT_WRONG_TOKENS_PER_MIN,
    MAX_BROKER_LEASE_S,
    MAX_CLIENT_TIMEOUT_S,
    MAX_COMMIT_TIMEOUT_S,
    MAX_CONNECTIONS,
    MAX_ITEMS,
    MAX_STARTUP_TIMEOUT_S,
    MAX_WRONG_TOKENS_PER_MIN,
    MIN_BROKER_LEASE_S,
    MIN_COMMIT_TIMEOUT_S,
)
from broker.service.config import BrokerConfig

ENV_PREFIX = "OSQUEUE_"

MIB = 1024 * 1024
#: the longest segment grace period and sweep interval taken (30 days), s
MAX_GRACE_S = 30 * 86_400.0


class BrokerFlags(BaseSettings):
    """What ``osqueue-broker`` runs with. Times in seconds; request size in MiB."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid",
                                      hide_input_in_errors=True)

    store: str = Field(description="file:///abs/dir or s3://bucket/prefix")
    listen: str = Field("127.0.0.1:8765",
                        description="HOST:PORT to listen on (port 0 picks a free one)")
    advertise_url: str | None = Field(
        None, description="URL clients and other brokers should use, written into the "
                          "queue objects this broker owns (default from --listen); without "
                          "a token, the API answers only requests to its host or loopback")
    token_env: str | None = Field(
        None, description="name of an environment variable holding the bearer token")
    token: SecretStr | None = Field(None, description="the bearer token clients must send")
    insecure_no_token: bool = Field(
        False, description="listen beyond loopback without a token (a trusted network only)")
    endpoint_url: str | None = Field(
        None, description="S3-compatible endpoint (else AWS_ENDPOINT_URL)")
    lease_s: float = Field(
        BROKER_LEASE_S, ge=MIN_BROKER_LEASE_S, le=MAX_BROKER_LEASE_S,
        description="broker lease in seconds: other brokers on the store take a queue over "
                    "when its owner wrote nothing for this long")
    commit_timeout_s: float = Field(
        DEFAULT_COMMIT_TIMEOUT_S, ge=MIN_COMMIT_TIMEOUT_S, le=MAX_COMMIT_TIMEOUT_S,
        description="how long one batch waits on failing storage before its callers are "
                    "answered (outcome_unknown or storage_unavailable)")
    startup_timeout_s: float = Field(
        DEFAULT_STARTUP_TIMEOUT_S, ge=0, le=MAX_STARTUP_TIMEOUT_S,
        description="how long start-up (the self-test, loading the queue objects) retries "
                    "transient storage errors (throttling, 5xx, timeouts, connection errors) "
                    "before it exits with the last one; 0: not at all")
    max_request_mb: float = Field(64.0, gt=0, description="request body limit, MiB")
    header_timeout_s: float = Field(
        DEFAULT_HEADER_TIMEOUT_S, gt=0, le=MAX_CLIENT_TIMEOUT_S,
        description="a client must send a request's headers within this many seconds "
                    "(408 and the connection closed past it)")
    body_timeout_s: float = Field(
        DEFAULT_BODY_TIMEOUT_S, gt=0, le=MAX_CLIENT_TIMEOUT_S,
        description="longest pause, in seconds, within a request body (408 and the "
                    "connection closed past it), and longest a client may leave its "
                    "send buffer full without reading (the connection dropped past it)")
    max_connections: int = Field(
        DEFAULT_MAX_CONNECTIONS, ge=1, le=MAX_CONNECTIONS,
        description="most open client connections; past it an idle or unheard one is "
                    "closed to make room, or, every one busy, the new one is answered 503")
    max_connections_per_address: int | None = Field(
        None, ge=1, le=MAX_CONNECTIONS,
        description="most open connections from one client address (default: half of "
                    "--max-connections); past it that address's own idle or unheard "
                    "connection is closed to make room, or the new one is answered 503")
    trusted_proxies: str | None = Field(
        None, description="comma-separated addresses or networks (10.0.0.5, 10.1.0.0/16) of "
                        "the proxies in front of the broker: from them, X-Forwarded-Proto "
                        "and X-Forwarded-For give the scheme and the client address "
                        "(default: trust none)")
    wrong_tokens_per_min: int = Field(
        DEFAULT_WRONG_TOKENS_PER_MIN, ge=0, le=MAX_WRONG_TOKENS_PER_MIN,
        description="wrong tokens one client address may present a minute (API and "
                    "dashboard login together) before its requests get 429 (0: no limit)")
    segment_push_jobs: int = Field(
        BrokerConfig.segment_push_jobs, ge=0, le=MAX_ITEMS,
        description="a push of at least this many jobs sharing their options, none with a "
                    "key (a bulk push, a Spark publish), goes into segment objects the queue "
                    "object references (0: no push does)")
    segment_push_bytes: int = Field(
        BrokerConfig.segment_push_bytes, ge=0, le=1 << 40,
        description="a push of at least this many bytes of payload, its jobs sharing their "
                    "options and none with a key, goes into segment objects too, so large "
                    "payloads never make a large queue object (0: not by size)")
    segment_grace_s: float = Field(
        BrokerConfig.segment_grace_s, gt=0, le=MAX_GRACE_S,
        description="a segment object no landed queue object references is deleted once "
                    "this broker has listed it for this many seconds; keep it well above the "
                    "longest a commit may take to land")
    sweep_s: float = Field(
        BrokerConfig.sweep_s, gt=0, le=MAX_GRACE_S,
        description="how often, in seconds, staging and unreferenced segment objects are "
                    "swept")
    self_test: bool = Field(True, description="run the conditional-write self-test "
                                              "at start-up")
    ui_read_only: bool = Field(
        False, description="the web dashboard (/ui/) shows the queues and refuses every "
                           "action")
    grouped_segments: bool = Field(
        BrokerConfig.grouped_segments,
        description="a bulk push whose jobs have groups goes into grouped segment objects "
                    "(format 3) like any bulk push, not into the queue object (on by "
                    "default; off, such pushes go into the queue object)")
    held_in_records: bool = Field(
        BrokerConfig.held_in_records,
        description="a claim from a segment object names its jobs in its claim record "
                    "instead of moving them into the queue object (on by default; off, "
                    "such claims move their jobs into the queue object)")
    held_cache_mb: int = Field(
        BrokerConfig.held_cache_mb, ge=1, le=65_536,
        description="MiB of held segment jobs' lines kept per queue (a miss is read again "
                    "from the segment)")
    spill_jobs: int = Field(
        BrokerConfig.spill_jobs, ge=0, le=1 << 20,
        description="past this many dead jobs in a queue object, a commit moves them into "
                    "a spill object the queue object references (0: never)")
    spill_bytes: int = Field(
        BrokerConfig.spill_bytes, ge=1, le=1 << 30,
        description="... or past this many bytes of their lines, so do they (with "
                    "spill_jobs above 0)")
    spill_pending: bool = Field(
        BrokerConfig.spill_pending,
        description="with spill_jobs above 0, pending job objects (retry-waiting, released) "
                    "spill too, into pending spill objects claims take from (on by default; "
                    "off, they stay in the queue object)")
    history_interval_s: float = Field(
        BrokerConfig.history_interval_s, ge=0.1, le=600.0,
        description="seconds between the samples of the dashboard's charts (an hour kept)")
    log_level: Literal["debug", "info", "warning", "error", "critical"] = Field(
        "info", description="least severe log level written (debug .. critical)")

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535:
            raise ValueError("wants HOST:PORT")
        return f"{host or '0.0.0.0'}:{int(port)}"

    @field_validator("advertise_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("wants an http:// or https:// URL")
        if value is not None and advertise_url_problem(value):
            raise ValueError("must not carry a user or password: give http(s)://host:port "
                             "and a bearer token")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: str | None) -> str | None:
        return None if value is None else ",".join(str(n) for n in parse_networks(value))

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _token_from_named_variable(self) -> BrokerFlags:
        if self.token_env:
            value = os.environ.get(self.token_env)
            if not value:
                raise ValueError(f"environment variable {self.token_env} is empty or unset")
            self.token = SecretStr(value)
        elif self.token is not None and not self.token.get_secret_value():
            # An empty token means "no auth" to the server: refuse it (as an empty
            # --token-env variable is) rather than serve every route unauthenticated.
            raise ValueError(f"{ENV_PREFIX}TOKEN is set but empty: give the token, or "
                             "unset it to run without auth")
        if self.token is None and not self.insecure_no_token and not is_loopback(self.host):
            raise ValueError(
                f"listening on {self.listen} (beyond loopback) needs a bearer token: set "
                f"{ENV_PREFIX}TOKEN or --token-env VAR, or pass --insecure-no-token "
                "on a trusted network")
        return self

    @classmethod
    def load(cls, flags: Mapping[str, Any] | None = None) -> BrokerFlags:
        """The flags from ``flags`` (field name -> value; only the flags given),
        then ``OSQUEUE_*`` variables, then defaults."""
        return cls(**dict(flags or {}))

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    def broker_config(self) -> BrokerConfig:
        """The :class:`BrokerConfig` these flags describe."""
        return BrokerConfig(lease_s=self.lease_s, self_test=self.self_test,
                            commit_timeout_s=self.commit_timeout_s,
                            startup_timeout_s=self.startup_timeout_s,
                            max_request_bytes=int(self.max_request_mb * MIB),
                            header_timeout_s=self.header_timeout_s,
                            body_timeout_s=self.body_timeout_s,
                            max_connections=self.max_connections,
                            max_connections_per_address=self.max_connections_per_address,
                            trusted_proxies=tuple(filter(None, (self.trusted_proxies or
                                                                "").split(","))),
                            wrong_tokens_per_min=self.wrong_tokens_per_min,
                            ui_read_only=self.ui_read_only,
                            grouped_segments=self.grouped_segments,
                            held_in_records=self.held_in_records,
                            held_cache_mb=self.held_cache_mb,
                            spill_jobs=self.spill_jobs, spill_bytes=self.spill_bytes,
                            spill_pending=self.spill_pending,
                            history_interval_s=self.history_interval_s,
                            segment_push_jobs=self.segment_push_jobs,
                            segment_push_bytes=self.segment_push_bytes,
                            segment_grace_s=self.segment_grace_s, sweep_s=self.sweep_s)

    def bearer(self) -> str | None:
        """The token, revealed (for the server only; never log it)."""
        return None if self.token is None else self.token.get_secret_value()


def flag_of(field: str) -> str:
    return "--no-self-test" if field == "self_test" else "--" + field.replace("_", "-")


def env_of(field: str) -> str:
    return ENV_PREFIX + field.upper()


def problems(exc: ValidationError) -> list[str]:
    """One line per bad value: the flag, its variable and what is wrong (never the value
    of the token)."""
    out = []
    for err in exc.errors(include_input=False, include_url=False):
        loc = [str(part) for part in err["loc"]]
        msg = err["msg"].removeprefix("Value error, ")
        if not loc:
            out.append(msg)
            continue
        field = loc[0]
        where = (f"{flag_of(field)} (or {env_of(field)})" if field != "token"
                 else env_of(field))
        out.append(f"{where}: {msg.lower() if msg == 'Field required' else msg}")
    return out
