"""The local Functions host: runs the queue, timer and HTTP triggers a ``function_app.py``
declares, with host.json's semantics, where Core Tools are not available
(``python -m lab.host``)."""
