"""Where an app's messages may go, checked before the commit that would send them.

A message sent to a name that is no endpoint, or to an endpoint that does not handle its
type, can never be processed: once committed, its signal fails with NotFound on every retry
or it is parked at the receiver, and replaying it changes nothing. So every delivery is
checked against the app while it is planned, before anything is written: a violation is a
handler error, nothing is committed, and the host retries and finally parks the incoming
message with the reason. Endpoints of another app are declared with the types they accept
(``BusApp.external_endpoint``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from shared.bus.effects import ServiceDeclaration
from shared.bus.handles import CANCEL_TYPE
from shared.bus.messages import Event, Message, topics_of, type_names
from shared.errors import BusError, CancelRefused
from shared.resources import check_endpoint_name


class UndeliverableMessage(BusError):
    """An outgoing message names a destination this app does not know, or one that does not
    take its type. Raised before the commit: nothing was written."""


class HandlesTypes(Protocol):
    """An endpoint of this app, as far as routing cares: the type names it handles (current
    and former) and the topics of the events among them."""

    @property
    def accepted(self) -> Mapping[str, type[Message]]: ...

    @property
    def topics(self) -> list[str]: ...

    @property
    def mode(self) -> str: ...


@dataclass(frozen=True)
class ExternalEndpoint:
    """An endpoint of another app (its queue outside this BusApp) and the message types it
    accepts: sends and subscriptions to it are allowed for those types only."""

    name: str
    accepts: Mapping[str, type[Message]]
    """Type name (current and former) -> model, so that an ingress can validate what it
    forwards."""


class Routes:
    """The destinations of one app: its own endpoints (read live, so endpoints and handlers
    declared later count) and the external endpoints it declares."""

    def __init__(
        self,
        endpoints: Mapping[str, HandlesTypes],
        services: Mapping[str, ServiceDeclaration] | None = None,
    ) -> None:
        self._endpoints = endpoints
        self.external: dict[str, ExternalEndpoint] = {}
        self.services: Mapping[str, ServiceDeclaration] = {} if services is None else services
        """The external services the app declares (read live, like the endpoints): a
        handler's effect request is checked against them (``HandlerContext.request_effect``)."""

    def declare_external(self, name: str, accepts: Collection[type[Message]]) -> ExternalEndpoint:
        check_endpoint_name(name)
        if name in self._endpoints or name in self.external:
            raise ValueError(f"endpoint {name} is declared twice")
        if not accepts or not all(
            isinstance(model, type) and issubclass(model, Message) for model in accepts
        ):
            raise ValueError(
                f"external endpoint {name}: accepts must list the message types (Command or "
                f"Event classes) it takes, got {list(accepts)!r}"
            )
        models = set(accepts)
        names = {n: model for model in models for n in type_names(model)}
        if len(names) != sum(len(type_names(model)) for model in models):
            raise ValueError(
                f"external endpoint {name}: two of the types it accepts share a name or former "
                f"name: {sorted(type_names(model) for model in models)}"
            )
        declared = ExternalEndpoint(name, names)
        self.external[name] = declared
        return declared

    def accepted_by(self, destination: str) -> Collection[str] | None:
        """The type names ``destination`` takes, or None when it is no known endpoint."""
        local = self._endpoints.get(destination)
        if local is not None:
            return local.accepted.keys()
        external = self.external.get(destination)
        return None if external is None else external.accepts.keys()

    def receivers_of(self, type_name: str) -> list[str]:
        """Every known endpoint, own or external, that takes ``type_name``."""
        names = [*self._endpoints, *self.external]
        return sorted(n for n in names if type_name in (self.accepted_by(n) or ()))

    def check_subscription(self, topic: str, endpoint: str) -> None:
        """Refuse, before the recipient list changes, a subscriber that could never take the
        topic's events (every publish would then be refused until it is removed)."""
        topics = self._topics_of(endpoint)
        if topics is None:
            raise ValueError(
                f"{endpoint!r} is no endpoint of this app; an endpoint of another app must be "
                f"declared with app.external_endpoint({endpoint!r}, accepts=[...])"
            )
        if topic not in topics:
            raise ValueError(
                f"{endpoint} takes no event of topic {topic}; its topics: {sorted(topics)}"
            )

    def takers_of(self, topic: str) -> list[str]:
        """Every known endpoint, own or external, that takes events of ``topic``: those
        ``check_subscription`` accepts as its subscribers."""
        names = [*self._endpoints, *self.external]
        return sorted(n for n in names if topic in (self._topics_of(n) or ()))

    def _topics_of(self, endpoint: str) -> set[str] | None:
        """The topics of the events ``endpoint`` takes, or None when it is no known endpoint."""
        local = self._endpoints.get(endpoint)
        if local is not None:
            return set(local.topics)
        external = self.external.get(endpoint)
        if external is None:
            return None
        events = {m for m in external.accepts.values() if issubclass(m, Event)}
        return {topic for model in events for topic in topics_of(model)}

    def check_send(self, sender: str, destination: str, type_name: str) -> None:
        if type_name == CANCEL_TYPE:
            self.check_cancel(sender, destination)
            return
        accepted = self.accepted_by(destination)
        if accepted is None:
            known = sorted([*self._endpoints, *self.external])
            raise UndeliverableMessage(
                f"{sender} sends {type_name} to {destination!r}, which is no endpoint of this "
                f"app (known: {known}); an endpoint of another app must be declared with "
                f"app.external_endpoint({destination!r}, accepts=[...])"
            )
        if type_name not in accepted:
            raise UndeliverableMessage(
                f"{sender} sends {type_name} to {destination}, which does not handle it "
                f"(it takes {sorted(accepted)}; {type_name} is taken by "
                f"{self.receivers_of(type_name) or 'no endpoint'})"
            )

    def check_cancel(self, sender: str, destination: str) -> None:
        """A cancel (``ctx.cancel``) goes only to an endpoint of this app in token mode: the
        others have no token claim to cancel a message by (``shared.bus.cancel``)."""
        local = self._endpoints.get(destination)
        if local is None:
            raise CancelRefused(
                f"{sender} cancels a message sent to {destination!r}, which is no endpoint of "
                "this app: only a message to one of the app's own endpoints can be cancelled"
            )
        if local.mode != "token":
            raise CancelRefused(
                f"{sender} cancels a message sent to {destination}, whose mode is "
                f"{local.mode}: only messages to token-mode endpoints can be cancelled"
            )

    def cancels_at(self, destination: str) -> bool:
        """Whether a message to ``destination`` can be cancelled (``check_cancel`` passes)."""
        local = self._endpoints.get(destination)
        return local is not None and local.mode == "token"

    def check_subscriber(self, sender: str, topic: str, subscriber: str, type_name: str) -> None:
        """A recipient list is changed from outside the app (``bus subscribe``), so each of
        its entries is checked like a send before the event is committed."""
        accepted = self.accepted_by(subscriber)
        if accepted is not None and type_name in accepted:
            return
        why = "is no endpoint of this app" if accepted is None else "does not handle it"
        raise UndeliverableMessage(
            f"{sender} publishes {type_name}: topic {topic} lists subscriber {subscriber!r}, "
            f"which {why}; remove it with `bus unsubscribe {topic} {subscriber}`, or declare "
            f"it with app.external_endpoint({subscriber!r}, accepts=[{type_name}, ...])"
        )
