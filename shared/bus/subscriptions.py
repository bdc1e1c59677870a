"""Which of the app's handling endpoints are missing from the recipient list of a topic.

An endpoint that handles an event must be on its topic's recipient list (``bus subscribe``),
or a publish finds no recipient for it and the event never reaches it. ``bus status`` and the
health endpoint name each gap with the command that closes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.bus.app import BusApp
from shared.bus.topics import RecipientLists


@dataclass(frozen=True)
class MissingSubscription:
    topic: str
    endpoint: str
    """Handles the topic's events but is not on its recipient list."""

    @property
    def fix(self) -> str:
        """The command that subscribes the endpoint, run where ``bus`` reaches the storage."""
        return f"bus subscribe {self.topic} {self.endpoint}"

    def __str__(self) -> str:
        return (
            f"topic {self.topic}: endpoint {self.endpoint} handles its events but is not "
            f"subscribed, so they do not reach it (run `{self.fix}`)"
        )

    def as_dict(self) -> dict[str, str]:
        return {"topic": self.topic, "endpoint": self.endpoint, "fix": self.fix}


def handled_topics(app: BusApp) -> list[tuple[str, str]]:
    """``(topic, endpoint)`` for every event an endpoint of ``app`` handles."""
    return [
        (topic, endpoint.name) for endpoint in app.endpoints.values() for topic in endpoint.topics
    ]


async def missing_subscriptions(app: BusApp, topics: RecipientLists) -> list[MissingSubscription]:
    """Every handling endpoint that ``topics`` does not list for its topic."""
    missing = []
    for topic, endpoint in handled_topics(app):
        if endpoint not in await topics.subscribers(topic):
            missing.append(MissingSubscription(topic, endpoint))
    return missing
