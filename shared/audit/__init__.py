"""The audit: proves from the audit rows and ingress records that every message sent was
processed exactly once, and shows latency, throughput and the message flow.

The Spark job lives in ``shared.audit.job`` (also runnable as a file under ``spark-submit``);
``python -m shared.audit`` is its command line (``run`` and ``export``). Only the modules that
need it import pyspark, so the rest of ``shared`` never depends on it.
"""
