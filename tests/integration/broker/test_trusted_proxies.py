"""The trusted-proxy setting (broker.http.peers, --trusted-proxies): forwarded
headers are believed from the trusted proxies only, on real sockets: the
dashboard's cookie gets ``Secure`` behind a TLS proxy, and the wrong-token
throttle and the per-address connection share count the forwarded client only
when the peer is a trusted proxy. Then the setting itself: flag, variable,
start_broker argument, bad values."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from broker import cli
from broker.flags import BrokerFlags
from broker.http.peers import TrustedProxies, address_key
from broker.http.server import BrokerServer
from broker.service.config import BrokerConfig
from broker.storage import FileStore
from tests.support.broker_process import eventually
from tests.support.sockets import GIVE_UP_S, Answer, ask, connect, request_bytes, until_closed

TOKEN = "proxy-test-token-0123456789"
PROXY, OTHER = "127.0.0.1", "127.0.0.2"
TLS = {"X-Forwarded-Proto": "https", "Host": "broker.example",
       "Origin": "https://broker.example"}


def serve(root: Path, **config: object) -> BrokerServer:
    full = BrokerConfig(self_test=False, **config)  # type: ignore[arg-type]
    return BrokerServer(FileStore(root), token=TOKEN, config=full).start_in_thread()


def login(server: BrokerServer, source: str, headers: dict[str, str]) -> Answer:
    form = urlencode({"token": TOKEN, "next": "/ui/"}).encode()
    with connect(server.port, source) as sock:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k != "Host")
        sock.sendall(f"POST /ui/login HTTP/1.1\r\nHost: {headers.get('Host', '127.0.0.1')}"
                     f"\r\n{head}Content-Type: application/x-www-form-urlencoded\r\n"
                     f"Content-Length: {len(form)}\r\nConnection: close\r\n\r\n".encode()
                     + form)
        return Answer(until_closed(sock))


@pytest.fixture()
def behind_proxy(tmp_path: Path) -> Iterator[BrokerServer]:
    with serve(tmp_path, trusted_proxies=(PROXY,), wrong_tokens_per_min=3) as server:
        yield server


def test_the_cookie_is_secure_behind_a_trusted_tls_proxy_only(behind_proxy: BrokerServer,
                                                              tmp_path: Path) -> None:
    trusted = login(behind_proxy, PROXY, TLS)
    assert trusted.status == 303
    assert "; Secure" in (trusted.header("set-cookie") or "")
    untrusted = login(behind_proxy, OTHER, TLS)  # the same header from another peer
    assert untrusted.status == 303
    assert "Secure" not in (untrusted.header("set-cookie") or "x")
    with serve(tmp_path / "default") as default:  # no setting: no proxy is trusted
        plain = login(default, PROXY, TLS)
        assert plain.status == 303 and "Secure" not in (plain.header("set-cookie") or "x")


def test_the_throttle_counts_the_forwarded_client_of_a_trusted_proxy(
        behind_proxy: BrokerServer) -> None:
    port = behind_proxy.port

    def stats(source: str, client: str, token: str) -> int:
        return ask(port, "GET", "/v1/queues/q/stats", source=source, token=token,
                   headers={"X-Forwarded-For": client}).status

    assert [stats(PROXY, "203.0.113.7", "wrong") for _ in range(3)] == [401] * 3
    assert stats(PROXY, "203.0.113.7", TOKEN) == 429  # that client is throttled ...
    # ... not the proxy's other clients (404: there is no queue q, but the token passed)
    assert stats(PROXY, "203.0.113.8", TOKEN) == 404
    # an untrusted peer's X-Forwarded-For is ignored: its own address is counted
    assert [stats(OTHER, f"203.0.113.{n}", "wrong") for n in range(3)] == [401] * 3
    assert stats(OTHER, "203.0.113.99", TOKEN) == 429


def long_poll(port: int, source: str) -> socket.socket:
    sock = connect(port, source)
    sock.sendall(request_bytes("POST", "/v1/queues/q/claim", b'{"worker": "w", "wait_s": 30}',
                               token=TOKEN))
    return sock


def claims_begun(server: BrokerServer) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in server.broker.metrics.render()
               .splitlines() if line.startswith("osqueue_ops_total{") and 'op="claim"' in line)


def test_a_trusted_proxy_is_not_held_to_one_address_s_share(tmp_path: Path) -> None:
    with serve(tmp_path, trusted_proxies=(PROXY,), max_connections=20,
               max_connections_per_address=2) as server:
        assert ask(server.port, "PUT", "/v1/queues/q", b"{}", token=TOKEN).status == 200
        polls = [long_poll(server.port, PROXY) for _ in range(4)]
        polls += [long_poll(server.port, OTHER) for _ in range(2)]
        try:
            eventually(lambda: claims_begun(server) >= 6, GIVE_UP_S, "six long polls")
            refused = Answer(until_closed(connect(server.port, OTHER)))
            assert refused.status == 503 and "limit of 2" in refused.json()["error"]
        finally:
            for sock in polls:
                sock.close()


# -- the setting -------------------------------------------------------------------

@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OSQUEUE_"):
            monkeypatch.delenv(name)


def settings(*argv: str) -> BrokerFlags:
    return BrokerFlags.load(vars(cli.build_parser().parse_args(list(argv))))


@pytest.mark.usefixtures("clean_env")
def test_the_setting_comes_from_a_flag_or_a_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings("--store", "file:///tmp/q").broker_config().trusted_proxies == ()
    config = settings("--store", "file:///tmp/q", "--trusted-proxies",
                      "10.0.0.5, 10.1.0.0/16,fd00::/8").broker_config()
    assert config.trusted_proxies == ("10.0.0.5/32", "10.1.0.0/16", "fd00::/8")
    monkeypatch.setenv("OSQUEUE_TRUSTED_PROXIES", "192.0.2.1")
    monkeypatch.setenv("OSQUEUE_WRONG_TOKENS_PER_MIN", "0")
    monkeypatch.setenv("OSQUEUE_MAX_CONNECTIONS_PER_ADDRESS", "40")
    config = settings("--store", "file:///tmp/q").broker_config()
    assert (config.trusted_proxies, config.wrong_tokens_per_min,
            config.max_connections_per_address) == (("192.0.2.1/32",), 0, 40)


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("bad", ["*", "proxy.internal", "10.0.0.300", "10.0.0.0/40"])
def test_a_bad_proxy_entry_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str],
                                                       bad: str) -> None:
    assert cli.main(["--store", "file:///tmp/q", "--trusted-proxies", f"10.0.0.1,{bad}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trusted-proxies (or OSQUEUE_TRUSTED_PROXIES)" in err
    assert "not an IP address or network" in err
    with pytest.raises(ValueError, match="not an IP address or network"):
        BrokerServer(FileStore("/tmp"), config=BrokerConfig(trusted_proxies=(bad,)))


def test_start_broker_takes_trusted_proxies(tmp_path: Path) -> None:
    from osqueue_spark.embedded import start_broker

    with start_broker(f"file://{tmp_path}", token=TOKEN, spark_conf={},
                      trusted_proxies="127.0.0.1") as server:
        assert "; Secure" in (login(server, PROXY, TLS).header("set-cookie") or "")


def test_addresses_are_counted_by_ipv4_or_ipv6_slash_64() -> None:
    assert address_key("10.0.0.7") == "10.0.0.7"
    assert address_key("2001:db8:1:2::5") == address_key("2001:db8:1:2:ffff::1") \
        == "2001:db8:1:2::/64"
    assert address_key("::ffff:10.0.0.7") == "10.0.0.7"
    assert address_key("") == "" and address_key("not-an-ip") == "not-an-ip"
    proxies = TrustedProxies.parse("10.0.0.0/24, ::1")
    assert "10.0.0.9" in proxies and "::1" in proxies and "::ffff:10.0.0.9" in proxies
    assert "10.0.1.9" not in proxies and "junk" not in proxies and None not in proxies
    assert not TrustedProxies.parse("")
