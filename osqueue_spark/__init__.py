"""osqueue_spark."""
