"""Bulk sends through Spark, exactly once per row (``python -m shared.bulk``, docs/bulk.md).

Each row of an input (Parquet, JSON or CSV) becomes one message sent through the ingress
(``shared.bus.ingress``) with an idempotency key derived from the job's name and the row's
key, so a Spark task that is retried, or a whole job that is submitted again, re-sends
nothing. ``replay`` re-sends a selection of poisoned messages the same way.
"""
