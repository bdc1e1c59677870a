"""The last audit's verdict in storage, where the operator console reads it.

An audit that reads an account's tables (``python -m shared.audit run`` without ``--input``)
also writes, beside its ``--out`` folder, ``latest.json`` (when it ran, the verdict and its
one-line summary) and ``latest.html`` (the report) to the ``audits`` container, replacing the
previous run's. An audit of an export reads no account and publishes nothing.

The blob is outside input to whoever reads it (anyone with write access to the container
could have written it): ``latest`` reads at most ``MAX_LATEST_BYTES`` and validates it against
``PublishedAudit``, and the console shows its strings as text.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.errors import CorruptRecord, NotFound
from shared.stores.blob import BlobContainer

LATEST = "latest.json"
REPORT = "latest.html"
MAX_LATEST_BYTES = 16 * 1024
MAX_SUMMARY_CHARS = 4000


class PublishedAudit(BaseModel):
    """What ``latest.json`` holds."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    at: datetime
    verdict: str = Field(max_length=16)
    summary: str = Field(max_length=MAX_SUMMARY_CHARS)
    report: str = REPORT
    """The report's blob name in the same container."""


async def publish(container: BlobContainer, audit: PublishedAudit, report_html: str) -> None:
    """Replace the last audit's report and verdict: the report first, so that a verdict
    never names a report of another run for longer than the two writes take."""
    await container.create_if_missing()
    await container.upload(REPORT, report_html.encode("utf-8"), {"kind": "audit-report"})
    await container.upload(LATEST, audit.model_dump_json().encode("utf-8"), {})


async def latest(container: BlobContainer) -> PublishedAudit | None:
    """The last audit published, None when none was; CorruptRecord when the blob is too
    large or not a published audit."""
    try:
        properties = await container.get_properties(LATEST)
        if properties.size > MAX_LATEST_BYTES:
            raise CorruptRecord(f"{LATEST} holds {properties.size} bytes, more than an audit's")
        blob = await container.read(LATEST)
    except NotFound:
        return None
    if len(blob.data) > MAX_LATEST_BYTES:  # replaced by a larger one since its size was read
        raise CorruptRecord(f"{LATEST} holds more bytes than an audit's")
    try:
        return PublishedAudit.model_validate_json(blob.data)
    except ValidationError as e:
        raise CorruptRecord(f"{LATEST} is not a published audit ({e.error_count()} errors)") from e
