"""Performing the effects handlers request (``docs/effects.md``): the provider interface
(``provider``), the performer endpoint (``performer``), an in-memory provider with
idempotency keys (``memory``), the HTTP provider (``http``) with the services' addresses and
credentials from app settings (``addresses``), the product's performer built from the app's
configuration (``wiring``), and the calls' spans and metrics (``telemetry``)."""
