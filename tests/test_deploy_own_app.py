"""docs/deploy.md, "Deploying your own app", run as written as far as its commands run here:
the app module written into a copy of the project, its ``local.settings.json``, ``bus
resources > infra/resources.json``, then the Azurite rehearsal: ``bus provision`` standing in
for the templates, the local host serving the real bindings with ``BUS_APP`` naming the user's
app, an event published through the HTTP ingress right after start-up, and health. No ``bus
subscribe`` anywhere: the app subscribes its endpoints on its first invocation, so the event
reaches both handling endpoints.

The page's blocks drive the test as in tests/test_walkthrough.py (whose helpers run them);
the Azure commands (``bash`` blocks: ``az``, ``func``) cannot run here and are checked for
the parameter and the publish they must contain.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.local.azurite import REPO_ROOT, AzuriteEndpoints
from tests.conftest import started_azurite
from tests.test_walkthrough import Block, Project, blocks_of, commands_of, state_of

PAGE = REPO_ROOT / "docs" / "deploy.md"
SECTION = "## Deploying your own app"


NOTIFIER_PROCESSED = (
    "2026-11-25 23:58:10,514 INFO shared.bus.receiver: endpoint=notifier type=ParcelShipped "
    "message_id=3c9d1e2f-4a5b-5c6d-9e8f-1a2b3c4d5e6f outcome=processed duration_ms=38.2 try=1"
)
"""The notifier's log line for the event, in the page's form (the matcher learns its id)."""


def section_blocks() -> list[Block]:
    """The fenced blocks of the page's section on deploying one's own app."""
    section = PAGE.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    return blocks_of(section)


@pytest.fixture
def own_azurite() -> Iterator[AzuriteEndpoints]:
    """An emulator of its own: the page's names (notifier, invoicing, parcelshipped) are
    fixed, and other tests may use them in the session's emulator."""
    yield from started_azurite()


def test_the_section_deploys_the_users_app_and_never_subscribes_by_hand() -> None:
    blocks = section_blocks()
    azure = "\n".join(b.text for b in blocks if b.language == "bash")
    assert "--parameters appModule=parcels.app:app" in azure
    assert 'func azure functionapp publish "$APP"' in azure
    console = [c for b in blocks if b.language == "console" for c, _ in commands_of(b.text)]
    assert "bus resources > infra/resources.json" in console
    assert "bus provision" in console
    assert not [command for command in console if "bus subscribe" in command]


@pytest.mark.azurite
def test_the_users_app_deployed_as_the_page_says_delivers_the_first_event(
    own_azurite: AzuriteEndpoints, tmp_path: Path
) -> None:
    project = Project(tmp_path, own_azurite)
    try:
        project.follow(section_blocks())
        # The page shows the invoicing endpoint's processing; the notifier's may come later
        # (the two run side by side), and stopping the host first would leave it undone.
        project.wait_for_log([NOTIFIER_PROCESSED])
        project.stop_host()
    finally:
        project.kill_host()

    # The one event published, processed once by each endpoint that handles it.
    for endpoint in ("invoicing", "notifier"):
        state = asyncio.run(state_of(own_azurite.connection_string, endpoint, "p-1"))
        assert state == {"parcels": 1}
    log = "".join(path.read_text() for path in project.host_logs)
    assert log.count("start-up subscription: 2 endpoint subscriptions in place") == 1
    assert "could not subscribe" not in log
