# Databricks notebook source
# MAGIC %md
# MAGIC # osqueue operations
# MAGIC Queue stats, dead jobs and redrive, pause and resume: what an on-call person needs.

# COMMAND ----------

import os
import tempfile

from osqueue_spark import QueueClient, register, start_broker

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
QUEUE = widget("queue", "operations")

# COMMAND ----------

if "spark" not in globals():
    from osqueue_spark.pipelines import local_session

    spark = local_session("osqueue-operations")
register(spark)
embedded = None
if not BROKER:  # locally: make a queue with some dead jobs to operate on
    embedded = start_broker(STORE)
    BROKER = embedded.url
    demo = QueueClient(BROKER, QUEUE)
    demo.create(max_attempts=1)
    demo.push_many([{"n": n} for n in range(20)])
    for job in demo.claim("demo", max_jobs=5):
        demo.fail(job.token, f"demo failure on {job.payload['n']}")
client = QueueClient(BROKER, QUEUE)

# COMMAND ----------

# MAGIC %md ## Stats

# COMMAND ----------

stats = client.stats()
print({k: stats[k] for k in ("counts", "oldest_pending_age_s", "completed_total",
                             "dead_total", "paused", "state_bytes")})

# COMMAND ----------

# MAGIC %md ## Dead jobs, straight from storage

# COMMAND ----------

dead = (spark.read.format("osqueue").option("store", STORE).option("queue", QUEUE).load()
        .where("status = 'dead'").select("id", "attempts", "last_error", "payload"))
dead.show(truncate=60)
DEAD_BEFORE = dead.count()

# COMMAND ----------

# MAGIC %md ## Redrive them (and pause/resume around maintenance)

# COMMAND ----------

client.pause()
redriven = client.redrive()
client.resume()
after = client.stats()["counts"]
print(f"redrove {redriven} dead jobs; counts now {after}")
OPERATIONS_RESULT = {"dead_before": DEAD_BEFORE, "redriven": redriven, "counts": after}

# COMMAND ----------

if embedded is not None:
    embedded.stop()
