"""Every private attribute of the Azure SDK objects that the adapter reaches into, in one place.

Two hot-path requests are built by the project and sent through the SDK client's own HTTP
pipeline, so authentication, retries, timeouts and the transport stay the SDK's (see
``shared.stores.azure.direct`` and ``shared.stores.azure.batch`` for why). The SDKs expose no
public way to do that, so the adapter uses:

- ``ContainerClient._pipeline`` (azure-storage-blob): the client's async pipeline;
- ``ContainerClient._credential_policy`` (azure-storage-blob): the policy that authorises
  each request, which also signs the sub-requests of a Blob Batch
  (``shared.stores.azure.blob_batch``);
- ``TableClient._client.send_request`` (azure-data-tables): the generated client's raw send;
- ``azure.storage.queue._shared.policies_async.ExponentialRetry``: the async retry policy,
  which azure-storage-queue does not export (azure-storage-blob does, from ``aio``).

A new SDK version may move them. The versions are pinned in requirements.txt, and these
accessors run when a store is built, so a moved attribute stops the host at start-up with
:class:`SdkInternalsChanged` naming the attribute and the installed version, never in the
middle of a message. ``tests/test_azure_sdk_internals.py`` checks them on every run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, cast

from azure.core.rest import AsyncHttpResponse
from azure.data.tables.aio import TableClient
from azure.storage.blob.aio import ContainerClient

from shared.errors import ConfigurationError

SendRequest = Callable[..., Awaitable[AsyncHttpResponse]]


class SdkInternalsChanged(ConfigurationError):
    """An SDK private attribute the adapter relies on is gone or changed shape."""


def installed(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def _changed(distribution: str, attribute: str, problem: str) -> SdkInternalsChanged:
    return SdkInternalsChanged(
        f"{distribution} {installed(distribution)} (azure-core {installed('azure-core')}): "
        f"{attribute} {problem}; shared/stores/azure/sdk_internals.py must be adapted to this "
        "SDK version, or the version pinned in requirements.txt installed"
    )


def queue_retry_policy() -> type[Any]:
    """azure-storage-queue's async exponential retry policy (exported only in its sync form,
    which an async client cannot run)."""
    try:
        from azure.storage.queue._shared.policies_async import ExponentialRetry
    except ImportError as e:
        raise _changed(
            "azure-storage-queue",
            "azure.storage.queue._shared.policies_async.ExponentialRetry",
            f"cannot be imported ({e})",
        ) from e
    return cast(type[Any], ExponentialRetry)


def blob_pipeline(client: ContainerClient) -> Any:
    """The container client's async HTTP pipeline (``ContainerClient._pipeline``): its
    ``run(request, **options)`` sends one request through every policy and the transport."""
    pipeline = getattr(client, "_pipeline", None)
    if pipeline is None:
        raise _changed("azure-storage-blob", "ContainerClient._pipeline", "is gone")
    if not callable(getattr(pipeline, "run", None)):
        raise _changed(
            "azure-storage-blob", "ContainerClient._pipeline.run", "is not a method any more"
        )
    return pipeline


def blob_credential_policy(client: ContainerClient) -> Any:
    """The container client's credential policy (``ContainerClient._credential_policy``):
    its ``on_request(pipeline_request)``, a coroutine for token credentials, authorises one
    request. None when the client has no credential (a SAS in the URL, or anonymous)."""
    missing = object()
    policy = getattr(client, "_credential_policy", missing)
    if policy is missing:
        raise _changed("azure-storage-blob", "ContainerClient._credential_policy", "is gone")
    if policy is not None and not callable(getattr(policy, "on_request", None)):
        raise _changed(
            "azure-storage-blob",
            "ContainerClient._credential_policy.on_request",
            "is not a method any more",
        )
    return policy


def table_send_request(client: TableClient) -> SendRequest:
    """The table client's raw send (``TableClient._client.send_request``): sends an
    ``HttpRequest`` through the client's pipeline and returns the undecoded response."""
    generated = getattr(client, "_client", None)
    send = getattr(generated, "send_request", None)
    if generated is None:
        raise _changed("azure-data-tables", "TableClient._client", "is gone")
    if not callable(send):
        raise _changed(
            "azure-data-tables", "TableClient._client.send_request", "is not a method any more"
        )
    return cast(SendRequest, send)
