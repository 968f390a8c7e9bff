# Databricks notebook source
# MAGIC %md
# MAGIC # osqueue operations
# MAGIC Queue stats, dead jobs and redrive, pause and resume: what an on-call person needs.

# COMMAND ----------

import tempfile

from osqueue_spark import QueueClient, register, start_broker
from osqueue_spark.pipelines.notebook import secret, session, widget

STORE = widget("store", f"file://{tempfile.mkdtemp(prefix='osq-nb-')}", globals())
BROKER = widget("broker", "", globals())
QUEUE = widget("queue", "operations", globals())
TOKEN = secret(widget("secret_scope", "osqueue", globals()),
               widget("token_key", "broker-token", globals()), globals(), required=bool(BROKER))

# COMMAND ----------

spark = session(globals(), "osqueue-operations")
register(spark)
embedded = None
if not BROKER:  # locally: make a queue with some dead jobs to operate on
    embedded = start_broker(STORE, token=TOKEN)
    BROKER = embedded.url
    TOKEN = getattr(embedded, "token", None) or TOKEN  # the token it enforces
    demo = QueueClient(BROKER, QUEUE, token=TOKEN)
    demo.create(max_attempts=1)
    demo.push_many([{"n": n} for n in range(20)])
    for job in demo.claim("demo", max_jobs=5):
        demo.fail(job.token, f"demo failure on {job.payload['n']}")
client = QueueClient(BROKER, QUEUE, token=TOKEN)

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
# Each attempt's error (the first and the latest ones), a row a failure:
(spark.read.format("osqueue").option("store", STORE).option("queue", QUEUE).load()
 .where("status = 'dead'").selectExpr("id", "inline(errors)").show(truncate=60))
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
