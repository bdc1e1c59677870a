"""Cosmos DB (NoSQL API) as a document store for endpoint rows (``store="cosmos"``):
``database`` (the account's database, a container per endpoint), ``documents`` (one
endpoint's items), ``errors`` (the adapter edge) and ``settings`` (read without the SDK)."""
