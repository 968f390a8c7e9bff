"""Session fixtures: real servers on 127.0.0.1 with free ports, stopped after."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.support.azurite import azure_container, azure_url, azurite_server  # noqa: F401
from tests.support.browser import chromium, ui_page  # noqa: F401
from tests.support.motoserver import MotoServer, set_default_credentials
from tests.support.scheduling import SPARK_FIXTURES, SparkGroupScheduling
from tests.support.spark_jvm import JAVA_OPTIONS


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup``: the classic Spark tests on one worker, the Connect ones on
    another, every other test wherever a worker is free (see
    :mod:`tests.support.scheduling`)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return SparkGroupScheduling(config, log, config.rootpath)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Spark tests and the slow tests go first, so the longest work starts at once
    and the short tests fill the other workers around it. A stable sort by module
    (a serial run still sets each module's fixtures up once), the same in every
    worker, as xdist requires."""

    def rank(item: pytest.Item) -> int:
        if SPARK_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            return 0
        return 1 if item.get_closest_marker("slow") else 2

    first: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        first[path] = min(first.get(path, 2), rank(item))
    items.sort(key=lambda item: first[item.nodeid.split("::")[0]])


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    set_default_credentials()
    server = MotoServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture()
def s3_bucket(moto_server: MotoServer) -> str:
    """A fresh bucket on the session's moto server."""
    import boto3

    name = f"osq-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=moto_server.endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=name)
    client.close()
    return name


@pytest.fixture()
def s3_url(moto_server: MotoServer, s3_bucket: str) -> str:
    return f"s3://{s3_bucket}/queues?endpoint={moto_server.endpoint}"


def _spark_environment() -> None:
    """What a JVM this process starts (the classic session's, the Connect server's)
    must find in its environment."""
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Spark's Python workers get the environment the JVM starts with: moto's fake
    # credentials now, for the tests that read an S3 store from Spark.
    set_default_credentials()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local SparkSession for the whole test session (2 cores, 4 task attempts)."""
    _spark_environment()
    from pyspark.sql import SparkSession

    import osqueue_spark

    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("osqueue-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        # on, as a user's session may have it (local_session leaves it off): the
        # readers must then give the rows they give with it off
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.extraJavaOptions", JAVA_OPTIONS)  # CPU: tests.support.spark_jvm
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    osqueue_spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_connect() -> Iterator[object]:
    """One Spark Connect session for the whole test session: a client of a
    local Connect server run as a child process (see ``tests.support.connectserver``).
    It needs no classic session: under xdist the Connect tests run on a worker of
    their own (``tests.support.scheduling``), which starts this server's JVM only."""
    _spark_environment()
    import osqueue_spark
    from tests.support.connectserver import ConnectServer

    server = ConnectServer(master="local[2,4]").start()  # 4 attempts: tests retry tasks
    session = server.session()
    session.conf.set("spark.sql.python.filterPushdown.enabled", "true")  # as `spark` has it
    osqueue_spark.register(session)
    yield session
    session.stop()
    server.stop()


@pytest.fixture(params=["classic", "connect"])
def any_spark(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> object:
    """The classic session, then the Connect session: a test that takes this runs
    under both kinds."""
    if request.param == "classic":
        return request.getfixturevalue("spark")
    session = request.getfixturevalue("spark_connect")  # before the variable: see below
    # As in a process that only talks Connect (the generic builder sets it):
    # pyspark.sql.functions then builds Connect columns, not classic ones.
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    return session


@pytest.fixture(autouse=True)
def _gc_as_found() -> Iterator[None]:
    """A test that runs the broker's entry point in-process (``broker.cli.main``)
    tunes this process's GC as a broker's; put it back, so the tests that check a
    user's process keeps its GC settings see an untuned process."""
    import gc

    from broker import gcpause

    threshold, enabled, tuned = gc.get_threshold(), gc.isenabled(), gcpause._tuned
    yield
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()
    gcpause._tuned = tuned


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[object]:
    """Our GCS JSON-API test server (``tests.support.gcsserver``: enforces generation
    preconditions), on a thread, for the whole test session."""
    from tests.support.gcsserver import GCSServer

    server = GCSServer().start()
    yield server
    server.stop()


@pytest.fixture()
def gcs_url(gcs_server: object) -> str:
    """A fresh bucket on the session's GCS test server, as a store URL."""
    name = f"osq-{uuid.uuid4().hex[:12]}"
    gcs_server.create_bucket(name)  # type: ignore[attr-defined]
    return f"gs://{name}/queues?endpoint={gcs_server.endpoint}"  # type: ignore[attr-defined]
