"""Three versions of one message type, and the apps that send and receive them, for the tests
of messages that evolve (issue 29): ``Ship`` as version 1 wrote it (one address line),
version 2 (street and city, upcast from 1) and version 3 (a country too, upcast from 2), plus
a version 1 with an extra optional field as a newer sender adds one; and ``Ship`` renamed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Self

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from pydantic import BaseModel

from shared.bus import Bus, BusApp, Command, HandlerContext
from shared.bus.app import Mode
from shared.bus.ingress import IngressClient
from shared.bus.messages import Message


class Version1:
    class Ship(Command):
        partition_by = "order"
        order: str
        address: str


class Version1Plus:
    """Version 1 as a newer release writes it: an optional field added, nothing else."""

    class Ship(Command):
        partition_by = "order"
        order: str
        address: str
        gift_note: str | None = None


class Version1Strict:
    class Ship(Command):
        partition_by = "order"
        strict_reading = True
        order: str
        address: str


class Version2:
    class Ship(Command):
        partition_by = "order"
        version = 2
        previous = Version1.Ship
        order: str
        street: str
        city: str

        @classmethod
        def upcast(cls, old: Version1.Ship) -> Self:
            street, _, city = old.address.partition(", ")
            return cls(order=old.order, street=street, city=city)


class Version3:
    class Ship(Command):
        partition_by = "order"
        version = 3
        previous = Version2.Ship
        order: str
        street: str
        city: str
        country: str

        @classmethod
        def upcast(cls, old: Version2.Ship) -> Self:
            return cls(order=old.order, street=old.street, city=old.city, country="unknown")


class Version3Retired:
    """Version 3 once no message of version 1 can be in flight: its oldest version read is 2,
    so version 1's model and upcaster are gone."""

    class Ship(Command):
        partition_by = "order"
        version = 3
        oldest_version = 2
        previous = Version2.Ship
        order: str
        street: str
        city: str
        country: str

        @classmethod
        def upcast(cls, old: Version2.Ship) -> Self:
            return cls(order=old.order, street=old.street, city=old.city, country="unknown")


class Dispatch(Command):
    """``Version1.Ship`` renamed."""

    partition_by = "order"
    former_names = ("Ship",)
    order: str
    address: str


class Shipments(BaseModel):
    """What the receiver saw of each message: its model's fields as one line."""

    seen: list[str] = []


def line(message: Message) -> str:
    return "|".join(f"{k}={v}" for k, v in message.model_dump().items())


def receiving_app(name: str, mode: Mode, model: type[Command], runs: Counter[str]) -> BusApp:
    """An endpoint ``name`` that handles ``model`` by noting it in its partition's state."""
    app = BusApp()
    endpoint = app.endpoint(name, state=Shipments, mode=mode)

    @endpoint.handles(model)
    def ship(ctx: HandlerContext[Shipments], message: Command) -> None:
        runs[message.type_name()] += 1
        ctx.state.seen.append(line(message))

    return app


def sending_client(bus: Bus, destinations: list[str], *models: type[Message]) -> IngressClient:
    """A client of another version of the app on ``bus``'s storage: it knows each of
    ``destinations`` as taking ``models`` (its own versions of them)."""
    app = BusApp()
    for destination in destinations:
        app.external_endpoint(destination, accepts=models)
    return Bus(app, bus.account, bus.config, sql=bus.sql).client("older")


@dataclass
class Metrics:
    reader: InMemoryMetricReader
    provider: MeterProvider

    def points(self, name: str) -> Iterator[NumberDataPoint]:
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in (m for m in scope.metrics if m.name == name):
                    for point in metric.data.data_points:
                        if isinstance(point, NumberDataPoint):
                            yield point

    def ignored(self) -> Counter[tuple[str, str]]:
        """(reader, message type) -> fields dropped by tolerant reading."""
        counted: Counter[tuple[str, str]] = Counter()
        for point in self.points("bus.messages.fields_ignored"):
            attributes = point.attributes or {}
            key = (str(attributes["bus.reader"]), str(attributes["bus.message.type"]))
            counted[key] += int(point.value)
        return counted


def metrics() -> Metrics:
    reader = InMemoryMetricReader()
    return Metrics(reader, MeterProvider(metric_readers=[reader]))
