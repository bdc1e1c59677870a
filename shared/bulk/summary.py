"""The summary of a bulk run: rows read, and what became of them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class BulkSummary:
    command: str
    job: str
    input: str
    out: str
    read: int
    """Input rows (for a replay: selection rows, a message id named twice counting twice)."""
    sent: int
    deduplicated: int
    rejected: int
    not_waiting: int
    uncertain: int
    requests: int
    """Storage requests the tasks that succeeded made (a retried task's failed attempts are
    not counted)."""
    partitions: int
    send_seconds: float
    """How long the Spark job that sends took, start to end."""
    seconds: float
    """The whole run, reading the input and writing the outputs included."""

    @classmethod
    def of(
        cls,
        counts: Mapping[str, int],
        *,
        command: str,
        job: str,
        input: str,
        out: str,
        read: int,
        requests: int,
        partitions: int,
        send_seconds: float,
        seconds: float,
    ) -> BulkSummary:
        """The summary of a run whose outcomes counted ``counts`` rows per status."""
        return cls(
            command=command,
            job=job,
            input=input,
            out=out,
            read=read,
            sent=counts.get("sent", 0),
            deduplicated=counts.get("deduplicated", 0),
            rejected=counts.get("rejected", 0),
            not_waiting=counts.get("not_waiting", 0),
            uncertain=counts.get("uncertain", 0),
            requests=requests,
            partitions=partitions,
            send_seconds=send_seconds,
            seconds=seconds,
        )

    @property
    def complete(self) -> bool:
        """Every row was sent, found sent before, or (a replay) found already moved."""
        return not (self.rejected or self.uncertain)

    @property
    def rows_per_second(self) -> float:
        return self.read / self.send_seconds if self.send_seconds > 0 else 0.0

    def to_json(self) -> str:
        data = {
            **asdict(self),
            "rows_per_second": round(self.rows_per_second, 1),
            "requests_per_row": round(self.requests / self.read, 2) if self.read else None,
        }
        return json.dumps(data, indent=2)

    def line(self) -> str:
        """One line for the console and logs."""
        extra = ""
        if self.command == "replay":
            extra = f" not_waiting={self.not_waiting} uncertain={self.uncertain}"
        return (
            f"bulk {self.command}: job={self.job} read={self.read} sent={self.sent} "
            f"deduplicated={self.deduplicated} rejected={self.rejected}{extra} "
            f"seconds={self.seconds:.1f} rows_per_second={self.rows_per_second:.0f} "
            f"out={self.out}"
        )
