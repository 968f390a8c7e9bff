# Databricks notebook source
# MAGIC %md
# MAGIC # osqueue worker pool
# MAGIC Every Spark task becomes a worker: it claims jobs in batches, runs your function
# MAGIC while a background thread heartbeats its leases, completes or fails each job, and
# MAGIC stops when the queue stays empty. Failed jobs are retried with backoff and
# MAGIC dead-lettered after `max_attempts`.

# COMMAND ----------

import os
import tempfile

from osqueue_spark import RESULT_SCHEMA, QueueClient, process, register, start_broker

try:
    dbutils  # type: ignore[name-defined]  # noqa: B018 - defined on Databricks
    ON_DATABRICKS = True
except NameError:
    ON_DATABRICKS = False


def widget(name: str, default: str) -> str:
    if ON_DATABRICKS:
        dbutils.widgets.text(name, default)  # type: ignore[name-defined]  # noqa: F821
        return str(dbutils.widgets.get(name))  # type: ignore[name-defined]  # noqa: F821
    return os.environ.get(f"OSQUEUE_{name.upper()}", default)


STORE = widget("store", f"file://{tempfile.mkdtemp(prefix='osq-nb-')}")
BROKER = widget("broker", "")
QUEUE = widget("queue", "worker-pool")
JOBS = int(widget("jobs", "2000"))
WORKERS = int(widget("workers", "4"))

# COMMAND ----------

if "spark" not in globals():
    from osqueue_spark.pipelines import local_session

    spark = local_session("osqueue-worker-pool")
register(spark)
embedded = None
if not BROKER:
    embedded = start_broker(STORE, backoff_base_s=0.1)
    BROKER = embedded.url
client = QueueClient(BROKER, QUEUE)
client.create(max_attempts=2)
client.push_many([{"payload": {"n": n, "bad": n % 500 == 7}} for n in range(JOBS)])

# COMMAND ----------

# MAGIC %md ## Your function: payload in, JSON-able result out (raise to fail the job)


def handle(payload: dict) -> dict:
    if payload["bad"]:
        raise ValueError(f"cannot handle {payload['n']}")
    return {"n": payload["n"], "square": payload["n"] ** 2}


# COMMAND ----------

results = (spark.range(WORKERS).repartition(WORKERS)
           .mapInPandas(process(handle, broker=BROKER, queue=QUEUE, batch_size=50, idle_s=2),
                        RESULT_SCHEMA))
summary = {r["status"]: r["count"] for r in results.groupBy("status").count().collect()}
print(summary)
stats = client.stats()
print(f"completed {stats['completed_total']}, dead {stats['counts']['dead']}")
WORKER_POOL_RESULT = {"summary": summary, "stats": stats}

# COMMAND ----------

if embedded is not None:
    embedded.stop()
