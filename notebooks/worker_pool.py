# Databricks notebook source
# MAGIC %md
# MAGIC # osqueue worker pool
# MAGIC Every Spark task becomes a worker: it claims jobs in batches, runs your function
# MAGIC while a background thread heartbeats its leases, completes or fails each job, and
# MAGIC stops when the queue stays empty. Failed jobs are retried with backoff and
# MAGIC dead-lettered after `max_attempts`.
# MAGIC
# MAGIC The tasks run on the executors, so they must reach the broker: on a classic cluster
# MAGIC leave `broker` empty (the broker runs embedded in this driver and advertises
# MAGIC `spark.driver.host`); on serverless set `broker` to a standalone broker's URL. The
# MAGIC token comes from the secret scope on Databricks (`dbutils.secrets.get`).

# COMMAND ----------

import tempfile

from osqueue_spark import RESULT_SCHEMA, QueueClient, process, register, start_broker
from osqueue_spark.pipelines.notebook import secret, session, widget

STORE = widget("store", f"file://{tempfile.mkdtemp(prefix='osq-nb-')}", globals())
BROKER = widget("broker", "", globals())
QUEUE = widget("queue", "worker-pool", globals())
JOBS = int(widget("jobs", "2000", globals()))
WORKERS = int(widget("workers", "4", globals()))
TOKEN = secret(widget("secret_scope", "osqueue", globals()),
               widget("token_key", "broker-token", globals()), globals(), required=bool(BROKER))

# COMMAND ----------

spark = session(globals(), "osqueue-worker-pool")
register(spark)
embedded = None
if not BROKER:
    embedded = start_broker(STORE, token=TOKEN, backoff_base_s=0.1)
    BROKER = embedded.url
    TOKEN = getattr(embedded, "token", None) or TOKEN  # the token it enforces
client = QueueClient(BROKER, QUEUE, token=TOKEN)
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
           .mapInPandas(process(handle, broker=BROKER, queue=QUEUE, token=TOKEN, batch_size=50,
                                idle_s=2),
                        RESULT_SCHEMA))
summary = {r["status"]: r["count"] for r in results.groupBy("status").count().collect()}
print(summary)
stats = client.stats()
print(f"completed {stats['completed_total']}, dead {stats['counts']['dead']}")
WORKER_POOL_RESULT = {"summary": summary, "stats": stats}

# COMMAND ----------

if embedded is not None:
    embedded.stop()
