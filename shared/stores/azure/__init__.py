"""Azure backend: the store interfaces over the async Azure SDKs (works against Azurite)."""

from shared.stores.azure.account import AzureStorageAccount

__all__ = ["AzureStorageAccount"]
