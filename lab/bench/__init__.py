"""``make bench``: what exactly-once costs, measured side by side on one Azurite.

The same workload runs through the at-least-once floor (no deduplication) and through every
endpoint mode of the bus; each measurement reports throughput, storage operations per message,
latency percentiles, residue left in storage and peak memory. ``docs/benchmarks.md`` explains
the method and the figures.
"""
