"""``start_broker`` in a cluster's driver: reachable, advertised, and behind a token.

There is no cluster here, so the Spark conf a cluster's driver would have
(``spark.master`` not local, ``spark.driver.host`` this machine's
non-loopback address) is handed in with ``spark_conf=``; everything else is
real: the broker binds every interface, and the requests go over real
sockets to the advertised address.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from broker import paths
from broker.http.server import is_loopback, primary_address
from broker.model.format.decode import decode_state
from broker.storage import FileStore
from osqueue_spark import start_broker
from osqueue_spark.client import QueueClient
from osqueue_spark.datasource.options import BrokerOptions
from osqueue_spark.embedded import cluster_driver_host


def _this_machines_address() -> str:
    addr = primary_address()
    if is_loopback(addr):
        pytest.skip("this machine has no non-loopback address to listen on")
    return addr


def _cluster_conf(driver_host: str) -> dict[str, str]:
    return {"spark.master": "spark://10.1.2.3:7077", "spark.driver.host": driver_host}


def _get(url: str, token: str | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(f"{url}/v1/queues")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_cluster_driver_host_needs_a_cluster_master() -> None:
    assert cluster_driver_host({"spark.master": "local[4]", "spark.driver.host": "h"}) is None
    assert cluster_driver_host({"spark.master": "local-cluster[2,1,1024]",
                                "spark.driver.host": "h"}) is None
    assert cluster_driver_host({"spark.driver.host": "h"}) is None
    assert cluster_driver_host({"spark.master": "yarn", "spark.driver.host": "h"}) == "h"
    assert cluster_driver_host(_cluster_conf("10.0.0.9")) == "10.0.0.9"


def test_on_loopback_without_a_cluster_no_token_is_needed(tmp_path: Path) -> None:
    with start_broker(f"file://{tmp_path}") as b:
        assert b.host == "127.0.0.1" and b.token is None
        assert b.url == f"http://127.0.0.1:{b.port}"
        assert _get(b.url)[0] == 200
        assert QueueClient(b.url, "q").push("hello")


def test_in_a_clusters_driver_it_listens_advertises_and_wants_the_token(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    addr = _this_machines_address()
    with caplog.at_level(logging.DEBUG), \
            start_broker(f"file://{tmp_path}", spark_conf=_cluster_conf(addr)) as b:
        token = b.token
        assert token is not None and len(token) >= 43  # token_urlsafe(32)
        assert b.host == "0.0.0.0"
        assert b.url == f"http://{addr}:{b.port}"
        # reachable at the advertised address, over a real socket
        with socket.create_connection((addr, b.port), timeout=5):
            pass
        status, body = _get(b.url)
        assert status == 401 and body["code"] == "unauthorized"
        assert _get(b.url, "not-the-token")[0] == 401
        assert _get(b.url, token)[0] == 200
        # the Spark options carry the handle's url and token straight on
        opts = BrokerOptions.parse({"broker": b.url, "token": token, "queue": "q"})
        assert opts.client().push("from an executor")
        assert token not in repr(b) and token not in repr(opts)
        state = decode_state(FileStore(tmp_path).read(paths.state_key("q")).data)
        assert state.broker is not None and state.broker.url == b.url  # what others discover
    assert all(token not in r.getMessage() for r in caplog.records)


def test_an_explicit_advertise_url_wins(tmp_path: Path) -> None:
    addr = _this_machines_address()
    url = "http://osqueue-broker.internal:18765"
    with start_broker(f"file://{tmp_path}", advertise_url=url,
                      spark_conf=_cluster_conf(addr)) as b:
        assert (b.url, b.host) == (url, "0.0.0.0")
        assert b.token is not None
        assert _get(f"http://{addr}:{b.port}", b.token)[0] == 200
    # without a cluster, an advertised address of another machine opens the listener too
    with start_broker(f"file://{tmp_path}", advertise_url=url) as b:
        assert (b.url, b.host) == (url, "0.0.0.0") and b.token is not None


def test_explicit_host_token_and_insecure_opt_out(tmp_path: Path) -> None:
    addr = _this_machines_address()
    store = f"file://{tmp_path}"
    with start_broker(store, host="127.0.0.1", spark_conf=_cluster_conf(addr)) as b:
        assert b.url == f"http://127.0.0.1:{b.port}" and b.token is None  # loopback: as asked
    with start_broker(store, host=addr, token="given-token") as b:
        assert b.url == f"http://{addr}:{b.port}" and b.token == "given-token"
        assert _get(b.url)[0] == 401 and _get(b.url, "given-token")[0] == 200
    with start_broker(store, spark_conf=_cluster_conf(addr), insecure_no_token=True) as b:
        assert b.token is None and _get(b.url)[0] == 200


def test_a_bad_advertise_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="advertise_url must be an http"):
        start_broker(f"file://{tmp_path}", advertise_url="broker:8765")


@pytest.mark.parametrize("url", ["http://ops:s3cr3t@broker.internal:8765",
                                 "https://s3cr3t@broker.internal", "ops:s3cr3t@broker:8765"])
def test_an_advertise_url_with_credentials_is_refused_without_showing_them(
        tmp_path: Path, url: str) -> None:
    """The advertised URL is written into every queue object the broker owns,
    answered by /healthz and logged: a user or password in it would leak."""
    with pytest.raises(ValueError, match="advertise_url must") as info:
        start_broker(f"file://{tmp_path / 'store'}", advertise_url=url)
    assert "s3cr3t" not in str(info.value)
    assert not (tmp_path / "store").exists() or list((tmp_path / "store").iterdir()) == []


def test_a_local_session_is_not_a_cluster_and_spark_redacts_the_token(
        spark: Any, tmp_path: Path) -> None:
    """The real classic session of the tests runs ``local[...]``: loopback. Its
    ``spark.driver.host`` is what a cluster's driver would advertise."""
    from osqueue_spark.embedded import _classic_driver_conf

    conf = _classic_driver_conf()
    assert conf is not None and conf["spark.master"].startswith("local")
    assert conf.get("spark.driver.host")
    assert cluster_driver_host() is None
    # Spark hides option values whose names match spark.redaction.regex: ours is "token".
    sc = spark.sparkContext
    regex = sc.getConf().get("spark.redaction.regex") or getattr(
        sc._jvm.org.apache.spark.internal.config, "package$").__getattr__(
        "MODULE$").SECRET_REDACTION_PATTERN().defaultValueString()
    assert re.search(regex, "token") and not re.search(regex, "broker")
    secret = "sekrit-" + "x" * 20
    with start_broker(f"file://{tmp_path}", host="127.0.0.1", token=secret) as b:
        df = (spark.read.format("osqueue").option("broker", b.url).option("token", secret)
              .option("store", f"file://{tmp_path}").option("queue", "q").load())
        plan = df._jdf.queryExecution().toString()
        assert "osqueue" in plan and secret not in plan


def test_the_jobs_embedded_broker_shares_its_token_with_the_job(tmp_path: Path) -> None:
    """``jobs/*`` read ``args.token`` inside ``broker_for``: it is the broker's own."""
    import argparse

    from osqueue_spark.pipelines.common import broker_for

    args = argparse.Namespace(broker=None, store=f"file://{tmp_path}", token="job-token")
    with broker_for(args) as url:
        assert args.token == "job-token"
        assert _get(url)[0] == 401 and _get(url, args.token)[0] == 200
    args = argparse.Namespace(broker=None, store=f"file://{tmp_path}", token=None)
    with broker_for(args) as url:
        assert args.token is None and _get(url)[0] == 200  # loopback: no token, as before


def test_the_handle_links_its_dashboard_and_can_make_it_read_only(tmp_path: Path) -> None:
    import urllib3

    http = urllib3.PoolManager()
    with start_broker(f"file://{tmp_path}", ui_read_only=True, lease_s=20.0) as b:
        assert b.dashboard_url == f"{b.url}/ui/"
        assert f'href="{b.dashboard_url}"' in b._repr_html_()
        assert b.config.lease_s == 20.0 and b.config.ui_read_only
        QueueClient(b.url, "q").push({"n": 1})
        page = http.request("GET", b.url + "/ui/queues/q")
        assert page.status == 200 and b"read-only" in page.data
        assert b'name="csrf"' not in page.data  # no form at all
        refused = http.request("POST", b.url + "/ui/queues/q/pause", redirect=False, headers={
            "cookie": page.headers["set-cookie"].split(";")[0], "origin": b.url})
        assert refused.status == 403 and b"read-only" in refused.data
        assert QueueClient(b.url, "q").stats()["paused"] is False
