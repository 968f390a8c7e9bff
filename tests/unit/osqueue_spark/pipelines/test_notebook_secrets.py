"""Tokens for notebooks and jobs: ``dbutils.secrets`` on Databricks, the environment
elsewhere, never a literal and never in an error message. No Spark here; ``dbutils``
is a fake because Databricks cannot be had."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from osqueue_spark.pipelines.common import job_args
from osqueue_spark.pipelines.notebook import dbutils_of, on_databricks, secret

VALUE = "tok-9f8e7d6c5b4a"


class FakeDbutils:
    """``dbutils`` with one secret (``osqueue``/``broker-token``) and text widgets."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []
        self.widgets = types.SimpleNamespace(text=lambda name, default: None,
                                             get=lambda name: "")
        self.secrets = types.SimpleNamespace(get=self._get)

    def _get(self, scope: str, key: str) -> str:
        self.asked.append((scope, key))
        if (scope, key) == ("osqueue", "broker-token"):
            return VALUE
        raise RuntimeError(f"Secret does not exist with scope: {scope} and key: {key}")


@pytest.fixture()
def off_databricks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    monkeypatch.delenv("OSQUEUE_TOKEN", raising=False)


@pytest.fixture()
def job_runtime(monkeypatch: pytest.MonkeyPatch) -> FakeDbutils:
    """A Databricks job's process: the runtime variable and ``databricks.sdk.runtime.dbutils``."""
    dbutils = FakeDbutils()
    runtime = types.ModuleType("databricks.sdk.runtime")
    runtime.dbutils = dbutils  # type: ignore[attr-defined]
    for name, module in (("databricks", types.ModuleType("databricks")),
                         ("databricks.sdk", types.ModuleType("databricks.sdk")),
                         ("databricks.sdk.runtime", runtime)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "16.4")
    monkeypatch.delenv("OSQUEUE_TOKEN", raising=False)
    return dbutils


def test_off_databricks_the_token_comes_from_the_environment(
        off_databricks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not on_databricks({}) and dbutils_of({}) is None
    assert secret("osqueue", "broker-token", {}) is None
    monkeypatch.setenv("OSQUEUE_TOKEN", VALUE)
    assert secret("osqueue", "broker-token", {}) == VALUE


def test_a_notebook_reads_its_token_with_dbutils(off_databricks: None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSQUEUE_TOKEN", "not-this-one")
    dbutils = FakeDbutils()
    namespace: dict[str, Any] = {"dbutils": dbutils}
    assert on_databricks(namespace)
    assert secret("osqueue", "broker-token", namespace) == VALUE
    assert dbutils.asked == [("osqueue", "broker-token")]


def test_a_missing_secret_names_scope_and_key_and_the_fix(off_databricks: None) -> None:
    namespace: dict[str, Any] = {"dbutils": FakeDbutils()}
    with pytest.raises(ValueError) as info:
        secret("osqueue", "nope", namespace)
    message = str(info.value)
    assert "'nope'" in message and "'osqueue'" in message and "put-secret" in message
    assert VALUE not in message
    # an embedded broker can do without one: it makes its own token
    assert secret("osqueue", "nope", namespace, required=False) is None


def test_a_job_reads_its_token_from_the_secret_scope(job_runtime: FakeDbutils) -> None:
    args = job_args("t").parse_args(["--token-secret", "osqueue/broker-token"])
    assert args.token == VALUE
    assert job_runtime.asked == [("osqueue", "broker-token")]
    assert VALUE not in repr(job_args("t"))


def test_token_secret_refuses_a_bad_spec_or_a_missing_secret(
        job_runtime: FakeDbutils, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (["--token-secret", "no-slash"], ["--token-secret", "osqueue/missing"]):
        with pytest.raises(SystemExit) as info:
            job_args("t").parse_args(bad)
        assert info.value.code == 2
    err = capsys.readouterr().err
    assert "SCOPE/KEY" in err and "'missing'" in err and VALUE not in err


def test_token_secret_off_databricks_says_what_to_use(
        off_databricks: None, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        job_args("t").parse_args(["--token-secret", "osqueue/broker-token"])
    assert "OSQUEUE_TOKEN" in capsys.readouterr().err
