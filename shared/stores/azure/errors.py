"""Translation of Azure SDK exceptions into the project's errors: the adapter edge."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)

from shared.errors import (
    AlreadyExists,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageError,
    TooLarge,
)

_PRECONDITION_CODES = {"ConditionNotMet", "UpdateConditionNotSatisfied"}
_EXISTS_CODES = {"EntityAlreadyExists", "BlobAlreadyExists", "TableAlreadyExists"}
_TOO_LARGE_CODES = {"RequestBodyTooLarge", "EntityTooLarge", "PropertyValueTooLarge"}


def error_code(error: HttpResponseError) -> str:
    """The service's error code. Some Table Storage 409s carry it only in the message text,
    so fall back to searching the text for the codes we act on."""
    code = getattr(error, "error_code", None)
    if code:
        return str(getattr(code, "value", code))
    text = str(error)
    for known in (*_PRECONDITION_CODES, *_EXISTS_CODES, *_TOO_LARGE_CODES):
        if known in text:
            return known
    return ""


def translate(error: AzureError, what: str) -> Exception:
    """Map one SDK exception to the project's error for ``what`` (e.g. 'blob tokens/x')."""
    if isinstance(error, ResourceNotFoundError):
        return NotFound(f"{what}: not found")
    if isinstance(error, ResourceModifiedError):
        return PreconditionFailed(f"{what}: changed (ETag mismatch)")
    if isinstance(error, ResourceExistsError):
        code = error_code(error)
        if code in _PRECONDITION_CODES:
            return PreconditionFailed(f"{what}: changed (ETag mismatch)")
        return AlreadyExists(f"{what}: already exists")
    if isinstance(error, (ServiceRequestError, ServiceResponseError)):
        return OutcomeUnknown(f"{what}: no response from storage ({error})")
    if isinstance(error, HttpResponseError):
        return from_status(error.status_code or 0, error_code(error), what)
    return OutcomeUnknown(f"{what}: {type(error).__name__}: {error}")


def from_status(status: int, code: str, what: str) -> StorageError | OutcomeUnknown:
    """The project's error for an HTTP status and service error code (for answers read by
    the project itself, such as the parts of a table transaction's response)."""
    if status == 404 or code == "PopReceiptMismatch":
        return NotFound(f"{what}: not found ({code})")
    if status == 412 or code in _PRECONDITION_CODES:
        return PreconditionFailed(f"{what}: changed (ETag mismatch)")
    if status == 409 and code in _EXISTS_CODES:
        return AlreadyExists(f"{what}: already exists")
    if status == 413 or code in _TOO_LARGE_CODES:
        return TooLarge(f"{what}: refused as too large ({code})")
    if status == 408 or status >= 500:
        return OutcomeUnknown(f"{what}: storage answered {status} {code}")
    return StorageError(f"{what}: storage refused the request: {status} {code}")


@contextmanager
def translated(what: str) -> Iterator[None]:
    """Run a block of SDK calls, re-raising SDK errors as the project's errors."""
    try:
        yield
    except AzureError as e:
        raise translate(e, what) from e


@asynccontextmanager
async def bounded(what: str, seconds: float) -> AsyncIterator[None]:
    """``translated``, with a deadline: a call that storage has not answered within
    ``seconds``, the SDK's retries included, ends as OutcomeUnknown, like a lost response
    (the request may still land later; the protocol already allows for that)."""
    try:
        async with asyncio.timeout(seconds):
            with translated(what):
                yield
    except TimeoutError as e:
        raise OutcomeUnknown(f"{what}: no answer from storage within {seconds:g} s") from e
