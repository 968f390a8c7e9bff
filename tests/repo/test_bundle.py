"""The Databricks Asset Bundle (``databricks.yml`` + ``resources/*.yml``) parses, names
only files that exist, deploys every ``jobs/`` pipeline in a serverless and a classic
variant, and holds no secret literal. Fast: no Spark, no Databricks CLI."""

from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "databricks.yml"
VAR = re.compile(r"\$\{var\.(\w+)\}")
# What a secret looks like if someone pastes one: a Databricks PAT, AWS key id, Azure account
# key or SAS signature, GCP private key, or a bearer header.
SECRET_SHAPES = re.compile(
    r"dapi[0-9a-f]{32}|AKIA[0-9A-Z]{16}|AccountKey=|[?&]sig=|BEGIN [A-Z ]*PRIVATE KEY|Bearer \S",
    re.IGNORECASE,
)
SECRET_ARG = re.compile(r"^--(token|password|secret|key|sas|credential)s?$", re.IGNORECASE)
SECRET_REF = re.compile(r"^\{\{secrets/[\w.-]+/[\w.-]+\}\}$")


def load_bundle(root: Path = ROOT) -> tuple[dict[str, Any], dict[str, tuple[Path, dict[str, Any]]]]:
    """The top-level config and every job as ``{name: (file that declares it, job)}``."""
    top = yaml.safe_load((root / "databricks.yml").read_text())
    jobs: dict[str, tuple[Path, dict[str, Any]]] = {}
    files = [root / "databricks.yml"]
    for pattern in top.get("include", []):
        files += sorted(root.glob(pattern))
    for path in files:
        doc = yaml.safe_load(path.read_text()) or {}
        for name, job in (doc.get("resources", {}).get("jobs") or {}).items():
            assert name not in jobs, f"job {name} declared twice"
            jobs[name] = (path, job)
    return top, jobs


def walk(node: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every (dotted key path, scalar) in a YAML tree."""
    if isinstance(node, dict):
        return [x for k, v in node.items() for x in walk(v, f"{path}.{k}")]
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in walk(v, f"{path}[{i}]")]
    return [(path, node)]


def secret_literals(doc: dict[str, Any]) -> list[str]:
    """Places in a parsed bundle file where a secret is written as a literal."""
    found = []
    for where, value in walk(doc):
        if not isinstance(value, str):
            continue
        if SECRET_SHAPES.search(value):
            found.append(f"{where}: looks like a credential")
        key = where.rsplit(".", 1)[-1]
        if re.search(r"token|password|secret|sas|credential", key, re.IGNORECASE) and not (
                VAR.fullmatch(value) or SECRET_REF.match(value)):
            found.append(f"{where}: a literal for {key}")
    for where, value in walk(doc):
        if where.endswith("]") and isinstance(value, str) and SECRET_ARG.match(value):
            found.append(f"{where}: {value} passes a secret on the command line")
    return found


def test_bundle_parses_with_targets_and_artifact() -> None:
    top, jobs = load_bundle()
    assert top["bundle"]["name"] == "osqueue-spark"
    assert {"dev", "prod"} <= set(top["targets"])
    assert top["targets"]["dev"]["mode"] == "development"
    assert top["targets"]["prod"]["mode"] == "production"
    (artifact,) = top["artifacts"].values()
    assert artifact["type"] == "whl" and (ROOT / artifact["path"] / "pyproject.toml").exists()
    assert "--wheel-dir dist" in artifact["build"]
    assert jobs


def test_every_variable_used_is_declared_and_every_declared_one_used() -> None:
    top, _ = load_bundle()
    text = "\n".join(p.read_text() for p in [BUNDLE, *ROOT.glob("resources/*.yml")])
    used = set(VAR.findall(text))
    declared = set(top["variables"])
    assert used == declared, (used - declared, declared - used)
    # the ones with no sensible default must be given at deploy time
    assert "default" not in top["variables"]["store_url"]
    assert "default" not in top["variables"]["broker_url"]


def test_every_path_named_exists() -> None:
    top, jobs = load_bundle()
    dist = (ROOT / top["artifacts"]["osqueue_wheel"]["path"] / "dist").resolve()
    checked = 0
    for name, (declared_in, job) in jobs.items():
        base = declared_in.parent
        for task in job["tasks"]:
            for kind, field in (("spark_python_task", "python_file"),
                                ("notebook_task", "notebook_path")):
                if kind in task:
                    target = (base / task[kind][field]).resolve()
                    assert target.is_file(), f"{name}: {task[kind][field]} does not exist"
                    checked += 1
            wheels = [lib["whl"] for lib in task.get("libraries", []) if "whl" in lib]
            for env in job.get("environments", []):
                wheels += [d for d in env["spec"].get("dependencies", []) if d.endswith(".whl")]
            for whl in wheels:
                # the artifact's build output: dist/*.whl under the bundle root
                pattern = (base / whl).resolve()
                assert pattern.parent == dist and pattern.name == "*.whl", (name, whl)
                built = glob.glob(str(pattern))
                assert all(Path(w).name.startswith("osqueue_spark-") for w in built), built
                checked += 1
    assert checked >= 2 * len(jobs)


def test_each_pipeline_has_a_serverless_and_a_classic_job() -> None:
    _, jobs = load_bundle()
    pipelines = {p.stem for p in (ROOT / "jobs").glob("*.py")}
    assert pipelines == {"producer", "worker_pool", "streaming_consumer", "archive_report"}
    assert set(jobs) == {f"{p}_{v}" for p in pipelines for v in ("serverless", "classic")}
    for name, (_, job) in jobs.items():
        tasks = job["tasks"]
        if name.endswith("_serverless"):
            envs = {e["environment_key"] for e in job["environments"]}
            assert "job_clusters" not in job
            for task in tasks:
                assert task["environment_key"] in envs
                assert not {"new_cluster", "existing_cluster_id", "job_cluster_key",
                            "libraries"} & set(task), f"{name}: serverless task names a cluster"
        else:
            clusters = {c["job_cluster_key"]: c["new_cluster"] for c in job["job_clusters"]}
            assert "environments" not in job
            for task in tasks:
                assert task["job_cluster_key"] in clusters
                assert any("whl" in lib for lib in task["libraries"])
                assert "environment_key" not in task


def test_serverless_jobs_use_a_standalone_broker_and_available_now() -> None:
    _, jobs = load_bundle()
    for name, (_, job) in jobs.items():
        for task in job["tasks"]:
            params = task["spark_python_task"].get("parameters", [])
            talks_to_broker = "archive_report" not in name
            if name.endswith("_serverless") and talks_to_broker:
                assert params[params.index("--broker") + 1] == "${var.broker_url}", name
            if talks_to_broker:
                secret_at = params.index("--token-secret") + 1
                assert params[secret_at] == "${var.secret_scope}/${var.token_key}", name
            if name == "streaming_consumer_serverless":
                assert "--available-now" in params and "--seconds" not in params


def test_no_secret_literal_in_the_bundle() -> None:
    for path in [BUNDLE, *ROOT.glob("resources/*.yml")]:
        assert secret_literals(yaml.safe_load(path.read_text())) == [], path


@pytest.mark.parametrize("bad", [
    {"params": ["--token", "${var.x}"]},
    {"spark_env_vars": {"OSQUEUE_TOKEN": "s3cr3t"}},
    {"spark_env_vars": {"X": "dapi0123456789abcdef0123456789abcdef"}},
    {"conf": {"fs.azure.account.key": "DefaultEndpointsProtocol=https;AccountKey=abc"}},
])
def test_the_secret_check_catches_a_literal(bad: dict[str, Any]) -> None:
    assert secret_literals(bad)


def test_the_secret_check_allows_references() -> None:
    assert secret_literals({"spark_env_vars": {"OSQUEUE_TOKEN": "{{secrets/osqueue/tok}}"},
                            "params": ["--token-secret", "${var.secret_scope}/${var.token_key}"]
                            }) == []


class FakeSecrets:
    """``dbutils.secrets`` (Databricks cannot be had here): one scope with one key."""

    def get(self, scope: str, key: str) -> str:
        if (scope, key) == ("osqueue", "broker-token"):
            return "tok-from-the-scope"
        raise RuntimeError(f"Secret does not exist with scope: {scope} and key: {key}")


def fake_databricks_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a Databricks job's Python sees: the runtime variable and ``databricks.sdk.runtime``."""
    import sys
    import types

    runtime = types.ModuleType("databricks.sdk.runtime")
    runtime.dbutils = types.SimpleNamespace(secrets=FakeSecrets())  # type: ignore[attr-defined]
    for name, module in (("databricks", types.ModuleType("databricks")),
                         ("databricks.sdk", types.ModuleType("databricks.sdk")),
                         ("databricks.sdk.runtime", runtime)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "client.4.0")


def test_jobs_accept_the_bundle_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each job's argument parser takes what its bundle task passes, reading the token
    from the secret scope the bundle names (its variables at their defaults; no Spark)."""
    import importlib.util

    fake_databricks_runtime(monkeypatch)
    top, jobs = load_bundle()
    values = {k: str(v.get("default", f"x-{k}")) for k, v in top["variables"].items()}
    for name, (declared_in, job) in jobs.items():
        task = job["tasks"][0]["spark_python_task"]
        spec = importlib.util.spec_from_file_location(
            f"bundle_{name}", (declared_in.parent / task["python_file"]).resolve())
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        seen: list[Any] = []
        real = module.job_args

        def capture(description: str, real: Any = real, seen: list[Any] = seen) -> Any:
            """The job's own parser; main() stops right after parsing (before Spark)."""
            parser = real(description)
            parse = parser.parse_args

            def parse_then_stop(argv: Any = None) -> Any:
                seen.append(parse(argv))
                raise SystemExit(0)

            parser.parse_args = parse_then_stop
            return parser

        monkeypatch.setattr(module, "job_args", capture)
        params = [VAR.sub(lambda m: values[m.group(1)], p) for p in task.get("parameters", [])]
        with pytest.raises(SystemExit) as exit_info:
            module.main(params)
        assert exit_info.value.code == 0, (name, params)
        (args,) = seen
        assert args.store == "x-store_url" and args.queue == "docs", name
        if "--token-secret" in params:
            assert args.token == "tok-from-the-scope", name
        if name.endswith("_serverless") and "--broker" in params:
            assert args.broker == "x-broker_url", name
