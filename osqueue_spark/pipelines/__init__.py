"""The example pipelines' building blocks: ``jobs/``, ``notebooks/`` and ``make demo``."""
