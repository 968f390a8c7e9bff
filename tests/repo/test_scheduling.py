"""The units of work tests/support/scheduling.py gives xdist's workers: the Spark
tests in two units (the classic session's and the Connect session's), each whole on
one worker, every other test a unit of its own."""

from __future__ import annotations

from pathlib import Path

from tests.support.scheduling import (
    CLASSIC_GROUP,
    CONNECT_GROUP,
    spark_functions,
    spark_unit,
    takes_spark,
)

SPARK_FILE = '''
import pytest

@pytest.fixture()
def frame(spark):
    return spark.range(3)

def test_both(any_spark, tmp_path): ...
def test_classic(spark): ...
def test_connect(spark_connect): ...
def test_by_a_fixture(frame): ...
class TestKinds:
    def test_method(self, any_spark): ...
'''


def test_a_spark_files_tests_are_classic_or_connect_by_fixture_and_parameter(
        tmp_path: Path) -> None:
    path = tmp_path / "test_x.py"
    path.write_text(SPARK_FILE)
    functions = spark_functions(str(path))
    assert functions is not None

    def unit(name: str) -> str:
        return spark_unit(f"tests/spark/test_x.py::{name}", functions)

    assert unit("test_both[classic]") == CLASSIC_GROUP
    assert unit("test_both[connect]") == CONNECT_GROUP
    assert unit("test_both[connect-3]") == CONNECT_GROUP  # stacked parameters
    assert unit("test_both[classic-connect_x]") == CLASSIC_GROUP  # (not the parameter)
    assert unit("test_classic") == CLASSIC_GROUP
    assert unit("test_connect") == CONNECT_GROUP
    assert unit("test_by_a_fixture") == CLASSIC_GROUP  # its fixture takes `spark`
    assert unit("TestKinds::test_method[connect]") == CONNECT_GROUP
    assert unit("TestKinds::test_method[classic]") == CLASSIC_GROUP


def test_files_without_spark_fixtures_are_no_spark_files(tmp_path: Path) -> None:
    plain = tmp_path / "test_plain.py"
    plain.write_text("def test_a(tmp_path, sparkle): ...\n")
    broken = tmp_path / "test_broken.py"
    broken.write_text("def test_a(spark:\n")
    assert not takes_spark(str(plain))
    assert not takes_spark(str(broken))
    assert not takes_spark(str(tmp_path / "missing.py"))

