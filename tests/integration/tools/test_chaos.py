"""The chaos tooling: the S3 fault proxy does what it says, and short seeded chaos
runs (tools/chaos over real broker processes) find the store intact.

The two runs assert the queue's invariants (nothing acknowledged lost, duplicated
or unexpected, no completion on a superseded token, no job archived twice). They
are timing-dependent by nature: a failure is a finding about the broker, not noise;
the assertion message carries the runner's summary and samples, and the run
directory (logs, client records, S3 request log) stays under pytest's tmp_path.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import eventually
from tests.support.faultproxy import FaultConfig, FaultProxy, RemoteControl
from tests.support.motoserver import MotoServer

ROOT = Path(__file__).resolve().parents[3]


def s3_client(endpoint: str, read_timeout_s: float = 5.0) -> Any:
    """A boto3 S3 client that tries each request once (faults reach the test)."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        config=Config(retries={"total_max_attempts": 1},
                                      connect_timeout=5, read_timeout=read_timeout_s))


@pytest.fixture()
def proxy(moto_server: MotoServer, tmp_path: Path) -> Iterator[FaultProxy]:
    with FaultProxy(moto_server.endpoint, seed=5, config=FaultConfig(rate=0.0),
                    request_log=str(tmp_path / "requests.jsonl")) as p:
        yield p


def logged_faults(proxy: FaultProxy) -> list[str | None]:
    """The fault of every storage request the proxy has finished with, in order."""
    assert proxy.request_log is not None
    with open(proxy.request_log.name) as f:
        return [json.loads(line)["fault"] for line in f]


def only(kind: str) -> dict[str, float]:
    return {k: (1.0 if k == kind else 0.0) for k in ("error500", "error503", "drop", "delay")}


def exists(client: Any, bucket: str, key: str) -> bool:
    try:
        client.head_object(Bucket=bucket, Key=key)
    except client.exceptions.ClientError as exc:
        if exc.response["ResponseMetadata"]["HTTPStatusCode"] == 404:
            return False
        raise
    return True


def test_dropped_put_landed_and_503_did_not(proxy: FaultProxy, moto_server: MotoServer,
                                            s3_bucket: str) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    via, direct = s3_client(proxy.url), s3_client(moto_server.endpoint)
    proxy.configure(rate=1.0, weights=only("drop"))
    # a create-if-absent whose answer is dropped: the client sees a connection error...
    with pytest.raises(BotoCoreError):
        via.put_object(Bucket=s3_bucket, Key="q/state", Body=b"v1", IfNoneMatch="*")
    # ... but the write landed
    got = direct.get_object(Bucket=s3_bucket, Key="q/state")
    assert got["Body"].read() == b"v1"
    # the same for a write-if-match
    with pytest.raises(BotoCoreError):
        via.put_object(Bucket=s3_bucket, Key="q/state", Body=b"v2", IfMatch=got["ETag"])
    assert direct.get_object(Bucket=s3_bucket, Key="q/state")["Body"].read() == b"v2"
    # a refused conditional write whose answer is dropped is counted apart
    with pytest.raises(BotoCoreError):
        via.put_object(Bucket=s3_bucket, Key="q/state", Body=b"v3", IfMatch=got["ETag"])
    assert direct.get_object(Bucket=s3_bucket, Key="q/state")["Body"].read() == b"v2"
    # GETs are never dropped (only PUTs are)
    assert via.get_object(Bucket=s3_bucket, Key="q/state")["Body"].read() == b"v2"

    for kind, status, code in (("error503", 503, "SlowDown"), ("error500", 500, "InternalError")):
        proxy.configure(weights=only(kind))
        with pytest.raises(ClientError) as info:
            via.put_object(Bucket=s3_bucket, Key=f"q/{kind}", Body=b"x")
        assert info.value.response["Error"]["Code"] == code
        assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == status
        assert not exists(direct, s3_bucket, f"q/{kind}")  # never forwarded

    proxy.heal()
    via.put_object(Bucket=s3_bucket, Key="q/healed", Body=b"ok")
    assert direct.get_object(Bucket=s3_bucket, Key="q/healed")["Body"].read() == b"ok"
    stats = proxy.stats()
    assert stats["faults"]["drop_landed"] == 2
    assert stats["faults"]["drop_refused"] == 1
    assert stats["faults"]["error503"] == 1 and stats["faults"]["error500"] == 1
    assert stats["faulted"] == 5
    assert stats["requests"] == 7


def test_delayed_request_lands_after_the_client_gave_up(proxy: FaultProxy,
                                                        moto_server: MotoServer,
                                                        s3_bucket: str) -> None:
    from botocore.exceptions import ReadTimeoutError

    via, direct = s3_client(proxy.url, read_timeout_s=0.5), s3_client(moto_server.endpoint)
    proxy.configure(rate=1.0, weights=only("delay"), delay_s=1.5, delay_then="forward")
    with pytest.raises(ReadTimeoutError):
        via.put_object(Bucket=s3_bucket, Key="late", Body=b"late")
    assert not exists(direct, s3_bucket, "late")
    eventually(lambda: exists(direct, s3_bucket, "late"), 10, "the delayed PUT to land")
    proxy.configure(delay_then="drop", delay_s=0.8)
    with pytest.raises(ReadTimeoutError):
        via.put_object(Bucket=s3_bucket, Key="never", Body=b"x")
    # the proxy logs a request once it is done with it: this one, dropped unsent
    eventually(lambda: "delay_drop" in logged_faults(proxy), 10, "the held PUT to be dropped")
    assert not exists(direct, s3_bucket, "never")
    faults = proxy.stats()["faults"]
    assert faults["delay_forward"] == 1 and faults["delay_drop"] == 1


def test_proxy_forwards_bodies_headers_and_methods(proxy: FaultProxy, moto_server: MotoServer,
                                                   s3_bucket: str) -> None:
    via, direct = s3_client(proxy.url), s3_client(moto_server.endpoint)
    big = os.urandom(5 * 1024 * 1024 + 17)
    md5 = base64.b64encode(hashlib.md5(big).digest()).decode()
    etag = via.put_object(Bucket=s3_bucket, Key="d/big", Body=big, ContentMD5=md5,
                          Metadata={"who": "chaos"})["ETag"]
    assert direct.get_object(Bucket=s3_bucket, Key="d/big")["Body"].read() == big
    got = via.get_object(Bucket=s3_bucket, Key="d/big")
    assert got["Body"].read() == big and got["ETag"] == etag
    head = via.head_object(Bucket=s3_bucket, Key="d/big")
    assert head["ContentLength"] == len(big) and head["Metadata"] == {"who": "chaos"}
    # conditional writes keep their meaning through the proxy
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError) as info:
        via.put_object(Bucket=s3_bucket, Key="d/big", Body=b"x", IfNoneMatch="*")
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] in (409, 412)
    new = via.put_object(Bucket=s3_bucket, Key="d/big", Body=b"y", IfMatch=etag)["ETag"]
    with pytest.raises(ClientError):
        via.put_object(Bucket=s3_bucket, Key="d/big", Body=b"z", IfMatch=etag)
    assert via.get_object(Bucket=s3_bucket, Key="d/big")["ETag"] == new
    listed = via.list_objects_v2(Bucket=s3_bucket, Prefix="d/")
    assert [o["Key"] for o in listed["Contents"]] == ["d/big"]
    via.delete_object(Bucket=s3_bucket, Key="d/big")
    assert not exists(direct, s3_bucket, "d/big")
    # the control endpoint, as another process would use it
    control = RemoteControl(proxy.url)
    assert control.set_enabled(True)["config"]["enabled"] is True
    assert control.configure(rate=0.5, weights={"delay": 0})["config"]["rate"] == 0.5
    assert control.heal()["config"]["enabled"] is False
    assert control.stats()["faulted"] == 0


def test_schedule_is_a_function_of_the_seed() -> None:
    from tools import chaos

    def schedule(seed: int) -> list[Any]:
        args = chaos.build_parser().parse_args(["--seed", str(seed), "--seconds", "100",
                                                "--kills", "5", "--pauses", "2"])
        return [vars(e) for e in chaos.make_schedule(args)]

    assert schedule(7) == schedule(7)
    assert schedule(7) != schedule(8)
    kinds = [e["kind"] for e in schedule(7)]
    assert sorted(kinds) == ["compete"] + ["kill"] * 5 + ["pause"] * 2
    times = [e["at_s"] for e in schedule(7)]
    assert times == sorted(times) and times[0] > 0 and times[-1] < 100


def test_the_checker_counts_the_jobs_segments_still_hold(tmp_path: Path) -> None:
    """The store check reads each referenced segment's untaken jobs (format
    version 4) and refuses one whose etag is not the reference's."""
    from broker import paths
    from broker.model import transitions as T
    from broker.model.format import codec, segment_format
    from broker.model.format.decode import decode_state
    from broker.model.state import SegmentRef
    from broker.storage import store_from_url
    from tools.chaos.checker import segment_jobs
    from tools.chaos.store import QUEUE, status_counts

    store = store_from_url(f"file://{tmp_path}")
    key = paths.segment_key(QUEUE, paths.segment_name(1, "0123abcd"))
    etag = store.create_if_absent(key, segment_format.encode_segment(
        QUEUE, 1, 0, 1_000, [b'{"p":1}', b'{"p":2}', b'{"p":3}'], max_attempts=3))
    state = T.new_state(1_000)
    state.counters.enqueued = 3
    state.segment_refs = [SegmentRef(key, etag, 1, 3, 0, 1_000, taken=1)]
    store.create_if_absent(paths.state_key(QUEUE), codec.encode(state))
    jobs = segment_jobs(store, decode_state(store.read(paths.state_key(QUEUE)).data))
    assert sorted(jobs) == ["j0000000002", "j0000000003"]
    assert jobs["j0000000003"]["status"] == "pending"
    assert status_counts(store) == {"pending": 2}
    state.segment_refs = [SegmentRef(key, "other", 1, 3, 0, 1_000)]
    with pytest.raises(ValueError, match="etag"):
        segment_jobs(store, state)


def test_the_checker_counts_a_job_two_segments_hold_once_each(tmp_path: Path) -> None:
    """A seq held by two references (which no decodable queue object has: a
    defence in depth of the check) is reported as held twice."""
    from broker import paths
    from broker.model import transitions as T
    from broker.model.format import segment_format
    from broker.model.state import SegmentRef
    from broker.storage import store_from_url
    from tools.chaos.checker import segment_jobs
    from tools.chaos.store import QUEUE

    store = store_from_url(f"file://{tmp_path}")
    refs = []
    for first, salt, lines in ((1, "0000aaaa", [b'{"p":1}', b'{"p":2}', b'{"p":3}']),
                               (2, "0000bbbb", [b'{"p":9}'])):
        key = paths.segment_key(QUEUE, paths.segment_name(first, salt))
        etag = store.create_if_absent(key, segment_format.encode_segment(
            QUEUE, first, 0, 1_000, lines, max_attempts=3))
        refs.append(SegmentRef(key, etag, first, len(lines), 0, 1_000))
    state = T.new_state(1_000)
    state.segment_refs = refs
    again: list[str] = []
    assert sorted(segment_jobs(store, state, again)) == ["j0000000001", "j0000000002",
                                                         "j0000000003"]
    assert again == ["j0000000002"]


def test_wait_for_sweep_reports_segment_objects_no_head_references(tmp_path: Path) -> None:
    from broker import paths
    from broker.model import transitions as T
    from broker.model.format import codec, segment_format
    from broker.model.state import SegmentRef
    from broker.storage import store_from_url
    from tools.chaos.segments import SegmentWatch, wait_for_sweep
    from tools.chaos.store import QUEUE

    store = store_from_url(f"file://{tmp_path}")
    keys, etags = [], []
    for first, salt in ((1, "0000aaaa"), (3, "0000bbbb")):
        keys.append(paths.segment_key(QUEUE, paths.segment_name(first, salt)))
        etags.append(store.create_if_absent(keys[-1], segment_format.encode_segment(
            QUEUE, first, 0, 1_000, [b'{"p":1}', b'{"p":2}'], max_attempts=3)))
    state = T.new_state(1_000)
    state.counters.enqueued = 4
    state.segment_refs = [SegmentRef(keys[1], etags[1], 3, 2, 0, 1_000)]
    store.create_if_absent(paths.state_key(QUEUE), codec.encode(state))
    said: list[str] = []
    watch = SegmentWatch(store, lambda: 0.0, 1.0)
    out = wait_for_sweep(watch, 0.0, said.append)
    assert (out["objects"], out["referenced"], out["left_behind"],
            out["referenced_missing"]) == (2, 1, 1, 0)
    assert [s["key"] for s in out["left_behind_samples"]] == [keys[0]]
    store.delete(keys[0])  # (what the owner's sweep does)
    store.delete(keys[1])  # a referenced object gone: the head refers to nothing
    out = wait_for_sweep(watch, 0.0, said.append)
    assert (out["objects"], out["left_behind"], out["referenced_missing"]) == (0, 0, 1)
    assert set(watch.seen) == set(keys)


def test_segment_options_default_by_store_and_reach_the_brokers() -> None:
    from tools import chaos

    assert chaos.parse_args([]).segment_grace_s == 5.0
    assert chaos.parse_args(["--store", "s3"]).segment_grace_s == 26.0
    assert chaos.parse_args(["--store", "s3", "--fault-delay-s", "3"]).segment_grace_s == 10.0
    assert chaos.parse_args(["--store", "gcs", "--segment-grace-s", "7"]).segment_grace_s == 7.0
    args = chaos.parse_args([])
    assert (args.segment_push_jobs, args.bulk_min, args.bulk_max, args.sweep_s) == (
        200, 200, 2000, 1.0)
    for bad in (["--bulk-min", "300", "--bulk-max", "200"], ["--producers", "100"],
                ["--sweep-s", "0"]):
        with pytest.raises(SystemExit):
            chaos.check_args(chaos.parse_args(bad))


def test_push_keys_are_opt_in_and_the_client_mode_is_gone() -> None:
    from tools import chaos

    def push_keys(*argv: str) -> bool:
        return bool(chaos.parse_args(list(argv)).push_keys)

    assert push_keys() is False
    assert push_keys("--push-keys") is True
    assert push_keys("--no-push-keys") is False
    assert push_keys("--preset", "long") is False
    with pytest.raises(SystemExit):
        chaos.build_parser().parse_args(["--client-mode", "native"])


def run_chaos(tmp_path: Path, store: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "results.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run(
        [sys.executable, "-m", "tools.chaos", "--store", store, "--seed", "11",
         "--seconds", "20", "--kills", "2", "--pauses", "1", "--competitors", "1",
         "--lease-s", "3", "--push-rate", "80", "--drain-timeout-s", "90",
         # bulk pushes and publishes of 200-800 jobs, by reference (the brokers'
         # --segment-push-jobs is 200)
         "--bulk-min", "200", "--bulk-max", "800", "--bulk-rate", "80",
         # no --push-keys: by the client's own request keys alone, retried pushes must
         # not duplicate
         "--max-runtime-s", "240", "--run-dir", str(tmp_path / "run"), "--out", str(out),
         *extra],
        capture_output=True, text=True, timeout=280, env=env, cwd=str(ROOT))
    results = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, results, proc.stdout[-6000:] + proc.stderr[-3000:]


def assert_sound_run(code: int, results: dict[str, Any], output: str) -> None:
    assert results, f"no results written:\n{output}"
    figures, check = results["figures"], results["check"]
    assert figures["acked_jobs"] > 200, output
    assert figures["kills_total"] == 2, output
    assert figures["pauses_total"] == 1, output
    assert figures["competing_brokers"] == 1, output
    assert not any(results["runner_problems"].values()), output
    assert results["drain"]["finished"], output
    for name in ("lost", "duplicated", "unexpected", "superseded", "double"):
        assert check[name] == 0, f"{name}: {check['samples']}\n{output}"
    # bulk pushes and publishes went by reference, and no segment object is left
    counts, segs = figures["client_counts"], results["segments"]
    assert counts.get("bulk_push_ok", 0) >= 1 and counts.get("publish_ok", 0) >= 1, output
    assert check["acked_by_publish"] >= 200, output
    assert segs["objects_seen"] >= 1, output
    assert segs["left_behind"] == 0 and segs["referenced_missing"] == 0, f"{segs}\n{output}"
    assert results["failures"]["anomalies"] == 0, f"{results['anomalies']}\n{output}"
    assert code == 0, output


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_chaos_run_on_file_store(tmp_path: Path) -> None:
    assert_sound_run(*run_chaos(tmp_path, "file"))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_chaos_run_on_s3_with_faults(tmp_path: Path) -> None:
    code, results, output = run_chaos(tmp_path, "s3", "--fault-rate", "0.03")
    assert_sound_run(code, results, output)
    faults = results["faults"]
    assert faults["requests"] > 100 and faults["faulted"] > 0, output
    # every bulk push and publish answered wrote at least one segment object that landed
    counts = results["figures"]["client_counts"]
    assert results["segments"]["segment_puts_landed"] >= counts["bulk_push_ok"] + \
        counts["publish_ok"] - counts.get("publish_duplicate_answers", 0), output


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_chaos_run_on_azurite(tmp_path: Path) -> None:
    assert_sound_run(*run_chaos(tmp_path, "azure"))


def test_segment_counts_from_the_broker_logs_and_the_s3_request_log(tmp_path: Path) -> None:
    from tools.chaos.segments import broker_log_counts, s3_segment_requests

    (tmp_path / "broker-b0.log").write_text(
        '{"level":"info","msg":"push of 300 jobs to chaos by reference: 1 segment object(s) '
        'written"}\n=== chaos: start of b0 ===\n'
        '{"level":"info","msg":"swept 2 segment object(s) of chaos that no commit '
        'references"}\n')
    (tmp_path / "broker-b1.log").write_text(
        '{"level":"info","msg":"push of 70000 jobs to chaos by reference: 2 segment '
        'object(s) written"}\n')
    assert broker_log_counts(tmp_path) == {"pushes_by_reference_logged": 2,
                                           "segments_written_logged": 3,
                                           "segments_swept_logged": 2}
    assert s3_segment_requests(tmp_path) is None
    seg = "/bkt/chaos/chaos/segments/seg-0000000001-0000aaaa.jsonl"
    lines = [{"m": "PUT", "path": seg, "status": 200, "fault": "drop_landed"},
             {"m": "PUT", "path": seg, "status": 412, "fault": None},  # a retry of it
             {"m": "PUT", "path": seg.replace("aaaa", "bbbb"), "status": None,
              "fault": "error503"},
             {"m": "PUT", "path": "/bkt/chaos/chaos/queue.json", "status": 200},
             {"m": "DELETE", "path": seg, "status": 204}]
    (tmp_path / "s3-requests.jsonl").write_text(
        "".join(json.dumps(line) + "\n" for line in lines))
    assert s3_segment_requests(tmp_path) == {"segment_puts_landed": 1, "segment_deletes": 1}
