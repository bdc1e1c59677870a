"""The resource-name file and the provisioner that creates its resources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.errors import ConfigurationError, NotFound
from shared.provisioning import provision
from shared.resources import Resources, load_resources, poison_queue
from tests.conftest import Backend, unique_name


def test_the_repository_resource_file_is_valid() -> None:
    resources = load_resources()
    assert resources.endpoints
    assert {"tokens", "topics", "parked"} <= set(resources.containers)
    for endpoint in resources.endpoints:
        assert endpoint in resources.queue_names
        assert poison_queue(endpoint) in resources.queue_names
        assert endpoint in resources.table_names


@pytest.mark.parametrize(
    "endpoints", [["Orders"], ["has-hyphen"], ["ab"], ["1orders"], ["orders", "orders"]]
)
def test_bad_endpoint_names_are_refused(tmp_path: Path, endpoints: list[str]) -> None:
    path = tmp_path / "resources.json"
    path.write_text(json.dumps({"containers": {}, "tables": {}, "endpoints": endpoints}))
    with pytest.raises(ConfigurationError):
        load_resources(path)


async def test_provisioning_creates_every_resource_and_can_run_twice(backend: Backend) -> None:
    suffix = unique_name("")[:8]
    resources = Resources(
        containers={"tokens": f"tok{suffix}"},
        tables={"ingress": f"ingress{suffix}"},
        endpoints=(f"orders{suffix}", f"billing{suffix}"),
    )
    account = backend.account
    with pytest.raises(NotFound):
        await account.queue(f"orders{suffix}").send("x")

    await provision(account, resources)
    report = await provision(account, resources)

    assert len(report.queues) == 4
    for queue in resources.queue_names:
        await account.queue(queue).send("x")
        await account.queue(queue).delete_queue()
    await account.blob_container(f"tok{suffix}").create("n", b"")
    await account.blob_container(f"tok{suffix}").delete_container()
    for table in resources.table_names:
        assert (await account.table(table).query()).entities == []
        await account.table(table).delete_table()
