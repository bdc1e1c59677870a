"""Storage interfaces (blob container, table, queue) and their backends."""

from shared.stores.account import StorageAccount
from shared.stores.blob import Blob, BlobContainer, BlobProperties
from shared.stores.queue import MessageQueue, QueueMessage
from shared.stores.table import Delete, Entity, Insert, Page, Table, Update, Upsert

__all__ = [
    "Blob",
    "BlobContainer",
    "BlobProperties",
    "Delete",
    "Entity",
    "Insert",
    "MessageQueue",
    "Page",
    "QueueMessage",
    "StorageAccount",
    "Table",
    "Update",
    "Upsert",
]
