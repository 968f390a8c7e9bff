"""Archive objects (broker/model/format/archive.py) through a broker: what is archived reads
back, record by record, whatever the payloads hold."""

from __future__ import annotations

from pathlib import Path

from broker.model.checks import parse_staged
from broker.model.format import archive
from broker.model.ops import CompleteItem
from broker.storage import FileStore
from tests.support.inprocess import run, started


def test_archive_of_a_payload_with_a_carriage_return_reads_back(tmp_path: Path) -> None:
    """An archive object holding a payload with a carriage return (JSON whitespace,
    kept verbatim by staged pushes and Spark writes) reads back, every record.
    Records were once split with bytes.splitlines(), which also breaks at a
    carriage return: the halves were not JSON and every read of the archive
    failed."""
    store = FileStore(tmp_path)
    payload = b'{"rows":[1,\r2]}'  # valid JSON: \r is whitespace

    async def main() -> None:
        a = await started(store)
        jobs = parse_staged(b"\t" + payload + b"\n\t\"other\"\n", check=True,
                                max_payload_bytes=1 << 20)
        await a.push("q", jobs)
        claimed = await a.claim("q", "w", 2, 30.0)
        await a.complete("q", [CompleteItem(j.token, b"1") for j in claimed])
        await a._queues["q"].archiver.wait(5)
        await a.stop(drain_s=5)

    run(main())
    assert len(archive.list_objects(store, "q")) == 1
    records = list(archive.read_all(store, "q"))  # raises JSONDecodeError today
    assert sorted(r["id"] for r in records) == ["j0000000001", "j0000000002"]
