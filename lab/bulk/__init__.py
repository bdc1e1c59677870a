"""The bulk-send bench (``make bulk-bench``)."""
