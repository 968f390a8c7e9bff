# Databricks notebook source
# MAGIC %md
# MAGIC # osqueue quickstart
# MAGIC A durable job queue in one JSON object on your object storage. This notebook
# MAGIC enqueues rows from a DataFrame, looks at the queue with `spark.read`, and
# MAGIC processes a few jobs by hand. On Databricks set the widgets; locally it uses an
# MAGIC embedded broker on a local directory.

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
QUEUE = widget("queue", "quickstart")
ROWS = int(widget("rows", "1000"))

# COMMAND ----------

if "spark" not in globals():  # plain Python: a local session
    from osqueue_spark.pipelines import local_session

    spark = local_session("osqueue-quickstart")
register(spark)
embedded = None
if not BROKER:
    embedded = start_broker(STORE)
    BROKER = embedded.url
client = QueueClient(BROKER, QUEUE)
print(f"broker {BROKER}, store {STORE}, queue {QUEUE}")

# COMMAND ----------

# MAGIC %md ## Enqueue a DataFrame (exactly once, even if Spark retries tasks)

# COMMAND ----------

from pyspark.sql import functions as F  # noqa: E402

df = spark.range(ROWS).select(F.to_json(F.struct(F.col("id").alias("n"))).alias("payload"),
                              (F.col("id") % 3).cast("int").alias("priority"))
df.write.format("osqueue").option("broker", BROKER).option("queue", QUEUE).mode("append").save()
print(client.stats()["counts"])

# COMMAND ----------

# MAGIC %md ## Read the queue straight from storage (no broker involved)

# COMMAND ----------

queue_df = (spark.read.format("osqueue").option("store", STORE).option("queue", QUEUE)
            .option("payloadSchema", "n long").load())
queue_df.groupBy("status", "priority").count().orderBy("priority").show()

# COMMAND ----------

# MAGIC %md ## Work a few jobs by hand

# COMMAND ----------

jobs = client.claim("notebook", max_jobs=5)
for job in jobs:
    client.complete(job.token, {"double": job.payload["n"] * 2})
print(f"completed {len(jobs)} jobs; stats: {client.stats()['counts']}")
QUICKSTART_RESULT = {"rows": ROWS, "completed": len(jobs), "total": client.stats()["total"]}

# COMMAND ----------

if embedded is not None:
    embedded.stop()
