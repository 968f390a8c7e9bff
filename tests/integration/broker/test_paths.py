"""broker.paths: queue names, write ids and publish prefixes are checked whole
(``fullmatch``: no trailing line break gets through), and a refused one changes
nothing in the store and lists nothing outside it, through a real broker process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import urllib3

from broker import paths
from broker.errors import InvalidRequest
from tests.support.broker_process import BrokerProcess

STAGED = {"content-type": "application/vnd.osqueue.staged"}
#: Files in a directory beside the store's root: a publish must never see them.
OUTSIDE_FILES = ("secret-dir/a.jsonl", "secret-dir/b.jsonl", "c.jsonl")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``store/`` (the broker's root) and ``outside/`` beside it, holding files."""
    site = tmp_path_factory.mktemp("paths")
    (site / "store").mkdir()
    for name in OUTSIDE_FILES:
        (site / "outside" / name).parent.mkdir(parents=True, exist_ok=True)
        (site / "outside" / name).write_bytes(b"not the broker's")
    return site


@pytest.fixture(scope="module")
def broker(site: Path) -> Iterator[BrokerProcess]:
    # A long broker lease: no renewal rewrites a queue object while a test compares.
    with BrokerProcess(f"file://{site / 'store'}", "--lease-s", "3600",
                       "--log-level", "debug") as proc:
        yield proc


def snapshot(root: Path) -> dict[str, bytes]:
    """Every directory and object under ``root``, objects read through their links
    (the store's hidden version, lock and temporary files are left out: a
    background thread removes superseded versions)."""
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel = os.path.relpath(dirpath, root)
        out[f"{rel}/"] = b""
        for name in filenames:
            if not name.startswith("."):
                out[f"{rel}/{name}"] = Path(dirpath, name).read_bytes()
    return out


def post(url: str, body: bytes, headers: dict[str, str] | None = None,
         method: str = "POST") -> urllib3.BaseHTTPResponse:
    return urllib3.request(method, url, body=body, retries=False,
                           headers=headers or {"content-type": "application/json"})


@pytest.mark.parametrize("prefix", [
    "../../../outside/", "../../../outside/secret-dir/", "w-1/../../../../outside/",
    "/etc/", "..", "w-1//", "w-1/\n", "w-1\\..\\..\\",
])
def test_a_publish_prefix_outside_the_staging_directory_is_refused(
        broker: BrokerProcess, site: Path, prefix: str) -> None:
    """``{"prefix": "../../../outside/"}`` listed a directory beside the store's root:
    the answer's ``discarded`` counted its files and the log named them."""
    queue = f"{broker.url}/v1/queues/pub"
    staged = post(f"{queue}/stage", b'{"write_id":"w-1/p0-c0"}\n\t1\n', STAGED)
    assert staged.status == 200, staged.data
    before, outside = snapshot(site / "store"), snapshot(site / "outside")
    logged = len(broker.lines)
    for keep in ([], ["w-1/p0-c0"]):
        r = post(f"{queue}/publish", orjson.dumps({"prefix": prefix, "keep": keep}))
        assert r.status == 422, r.data
        assert r.json()["code"] == "invalid_request" and "prefix" in r.json()["error"]
        assert "discarded" not in r.json()
        assert not [f for f in OUTSIDE_FILES if Path(f).name.encode() in r.data]
    assert snapshot(site / "store") == before
    assert snapshot(site / "outside") == outside
    log = "".join(broker.lines[logged:])
    assert not [f for f in OUTSIDE_FILES if Path(f).name in log], log


def test_a_good_publish_prefix_still_publishes(broker: BrokerProcess) -> None:
    queue = f"{broker.url}/v1/queues/pub-ok"
    assert post(f"{queue}/stage", b'{"write_id":"w-2/p0-c0"}\n\t1\n', STAGED).status == 200
    r = post(f"{queue}/publish", orjson.dumps({"prefix": "w-2/", "keep": ["w-2/p0-c0"]}))
    assert r.status == 200 and r.json()["published"] == 1, r.data


@pytest.mark.parametrize("name", ["docs%0A", "docs%0D", "%20docs", "docs%0A%0A", "docs%00"])
def test_queue_names_with_a_line_break_or_space_change_nothing(
        broker: BrokerProcess, site: Path, name: str) -> None:
    """``"docs\\n"`` passed ``re.match(...$)``: a push made a store directory
    ``docs\\n`` (and a metric label)."""
    queue = f"{broker.url}/v1/queues/{name}"
    before = snapshot(site / "store")
    answers = [post(f"{queue}/push", b'{"jobs":[{"payload":1}]}'),
               post(f"{queue}/push", b"\t1\n", STAGED),
               post(f"{queue}/stage", b'{"write_id":"w-1/c0"}\n\t1\n', STAGED),
               post(queue, b'{"settings":{}}', method="PUT"),
               post(f"{queue}/claim", b'{"worker":"w"}')]
    for r in answers:
        assert 400 <= r.status < 500, r.data
        assert r.json()["code"] in ("invalid_request", "not_found"), r.data
    assert snapshot(site / "store") == before
    assert not [d for d in os.listdir(site / "store") if d.strip() != d or "\x00" in d]


@pytest.mark.parametrize("write_id", ["w-1\n", "w-1/c0\n", "w-1/c0\r", " w-1"])
def test_write_ids_with_a_line_break_change_nothing(
        broker: BrokerProcess, site: Path, write_id: str) -> None:
    before = snapshot(site / "store")
    header = orjson.dumps({"write_id": write_id})
    r = post(f"{broker.url}/v1/queues/stage-q/stage", header + b"\n\t1\n", STAGED)
    assert r.status == 422 and "write id" in r.json()["error"], r.data
    assert snapshot(site / "store") == before


@pytest.mark.parametrize("name", ["docs", "a", "Q-1.x_y", "9" * 128])
def test_check_queue_name_accepts(name: str) -> None:
    assert paths.check_queue_name(name) == name


@pytest.mark.parametrize("name", ["docs\n", "docs\r", " docs", "docs ", "", ".docs", "a..b",
                                  "9" * 129, "a/b", "\ndocs", "docs\n\n"])
def test_check_queue_name_refuses(name: str) -> None:
    with pytest.raises(InvalidRequest, match="invalid queue name"):
        paths.check_queue_name(name)


@pytest.mark.parametrize("write_id", ["w-1\n", "w-1/c0\n", "w-1/", "w-1//c0", "../x", "/x",
                                      "w-1/../x", "w" * 301, "", "w-1/./c0", "w-1/."])
def test_check_write_id_refuses(write_id: str) -> None:
    with pytest.raises(InvalidRequest, match="invalid write id"):
        paths.check_write_id(write_id)


@pytest.mark.parametrize("prefix", ["w-1/", "s-abc/", "w-1/p0-", "w", "w" * 300])
def test_check_write_prefix_accepts(prefix: str) -> None:
    assert paths.check_write_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["../x/", "/x/", "w-1/../", "w-1//", "w-1/\n", "", ".",
                                    "w-1\\", "w" * 301, "w-1/./", "w-1/."])
def test_check_write_prefix_refuses(prefix: str) -> None:
    with pytest.raises(InvalidRequest, match="invalid write prefix"):
        paths.check_write_prefix(prefix)


def test_a_long_bad_name_is_quoted_short() -> None:
    with pytest.raises(InvalidRequest) as info:
        paths.check_queue_name("x" * 10_000 + "\n")
    assert len(str(info.value)) < 300
