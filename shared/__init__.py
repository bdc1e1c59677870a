"""Exactly-once messaging for Azure Functions over Azure Storage queues, blobs and tables."""

__version__ = "0.1.0"
