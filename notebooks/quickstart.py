# Databricks notebook source
# MAGIC %md
# MAGIC # osqueue quickstart
# MAGIC A durable job queue in one JSON object on your object storage. This notebook
# MAGIC enqueues rows from a DataFrame, looks at the queue with `spark.read`, and
# MAGIC processes a few jobs by hand. On Databricks set the widgets; locally it uses an
# MAGIC embedded broker on a local directory.
# MAGIC
# MAGIC **Two ways to run on Databricks**
# MAGIC - *Embedded broker, classic cluster*: leave `broker` empty. `start_broker` runs the
# MAGIC   broker in this driver, listening beyond loopback and advertising `spark.driver.host`
# MAGIC   to the executors, with a bearer token (the secret below if the scope holds it, else
# MAGIC   one it makes).
# MAGIC - *Standalone broker, required on serverless*: serverless compute's
# MAGIC   executors cannot reach the notebook's process. Run `osqueue-broker` where the cluster
# MAGIC   can reach it, set `broker` to its URL and keep its token in the secret scope
# MAGIC   (widgets `secret_scope` and `token_key`).
# MAGIC
# MAGIC `store` must be a cloud URL (`s3://`, `abfss://`, `gs://`), never a `/Volumes/...` or
# MAGIC `/dbfs/...` path: those FUSE mounts lack the locks and atomic rename the file store needs.

# COMMAND ----------

import tempfile

from osqueue_spark import QueueClient, register, start_broker
from osqueue_spark.pipelines.notebook import secret, session, widget

STORE = widget("store", f"file://{tempfile.mkdtemp(prefix='osq-nb-')}", globals())
BROKER = widget("broker", "", globals())
QUEUE = widget("queue", "quickstart", globals())
ROWS = int(widget("rows", "1000", globals()))
# dbutils.secrets.get on Databricks, OSQUEUE_TOKEN locally; never typed into the notebook
TOKEN = secret(widget("secret_scope", "osqueue", globals()),
               widget("token_key", "broker-token", globals()), globals(), required=bool(BROKER))

# COMMAND ----------

spark = session(globals(), "osqueue-quickstart")
register(spark)
embedded = None
if not BROKER:
    embedded = start_broker(STORE, token=TOKEN)
    BROKER = embedded.url
    TOKEN = getattr(embedded, "token", None) or TOKEN  # the token it enforces
client = QueueClient(BROKER, QUEUE, token=TOKEN)
AUTH = {"token": TOKEN} if TOKEN else {}
print(f"broker {BROKER}, store {STORE}, queue {QUEUE}")

# COMMAND ----------

# MAGIC %md ## Enqueue a DataFrame (exactly once, even if Spark retries tasks)

# COMMAND ----------

from pyspark.sql import functions as F  # noqa: E402

df = spark.range(ROWS).select(F.to_json(F.struct(F.col("id").alias("n"))).alias("payload"),
                              (F.col("id") % 3).cast("int").alias("priority"))
(df.write.format("osqueue").option("broker", BROKER).option("queue", QUEUE).options(**AUTH)
 .mode("append").save())
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
