"""podium's one writer (webhook/serve/writer.py) on the in-memory API twin: what each write
says it did (``audit.EffectOutcome``), what it reads, and what it leaves to its caller."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from webhook.core.audit import EffectOutcome
from webhook.core.objects import Obj
from webhook.kube import errors, twins
from webhook.serve import writer

NS = "team-a"


def config_map(zone: str = "zone-a", name: str = "rec") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "data": {"zone": zone},
    }


def policy() -> dict[str, Any]:
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"name": "pol", "namespace": NS},
        "spec": {"endpointSelector": {}},
    }


def same_zone(zone: str) -> Any:
    def same(existing: Obj) -> bool:
        return bool(existing["data"]["zone"] == zone)

    return same


def world(*objects: dict[str, Any], missing: set[str] | None = None) -> twins.InMemoryObjects:
    api = twins.InMemoryObjects(missing_kinds=missing or ())
    for obj in objects:
        api.put(obj)
    return api


def ops(api: twins.InMemoryObjects) -> list[str]:
    return [op for op, _, _ in api.calls]


async def test_a_new_object_is_created_and_said_so() -> None:
    api = world()
    written = await writer.create(api, config_map())
    assert written == writer.Written("ConfigMap", "rec", NS, EffectOutcome.CREATED)
    assert written.effect() == {
        "kind": "ConfigMap",
        "name": "rec",
        "namespace": NS,
        "outcome": "created",
    }
    assert ops(api) == ["create"]
    assert written.as_dict() == {"kind": "ConfigMap", "name": "rec", "outcome": "created"}
    # Plain strings, not the enum: entries are also written as YAML (podium review -o yaml).
    assert {type(v) for v in (*written.effect().values(), *written.as_dict().values())} == {str}


async def test_an_object_there_already_is_kept_unread_unless_compared() -> None:
    api = world(config_map("zone-b"))
    written = await writer.create(api, config_map())
    assert written.outcome is EffectOutcome.EXISTS and ops(api) == ["create"]


async def test_an_object_there_already_that_differs_is_followed() -> None:
    api = world(config_map("zone-b"))
    written = await writer.create(api, config_map(), same=same_zone("zone-a"))
    assert written.outcome is EffectOutcome.FOLLOWED and ops(api) == ["create", "get"]
    assert written.existing is not None and written.existing["data"]["zone"] == "zone-b"
    same = await writer.create(api, config_map("zone-b"), same=same_zone("zone-b"))
    assert same.outcome is EffectOutcome.EXISTS and same.existing is None


async def test_a_kind_not_served_is_kind_missing_only_where_optional() -> None:
    api = world(missing={"CiliumNetworkPolicy"})
    written = await writer.create(api, policy(), optional=True)
    assert written.outcome is EffectOutcome.KIND_MISSING
    assert written.effect()["outcome"] == "skipped-crd-missing"
    with pytest.raises(errors.NotFound):
        await writer.create(api, policy())
    with pytest.raises(errors.NotFound):
        await writer.create_or_replace(api, policy())
    replaced = await writer.create_or_replace(api, policy(), optional=True)
    assert replaced.outcome is EffectOutcome.KIND_MISSING


async def test_create_or_replace_overwrites_under_the_version_it_read() -> None:
    api = world(config_map("zone-b"))
    seen: list[str] = []

    async def guard(existing: Obj) -> None:
        seen.append(existing["data"]["zone"])

    written = await writer.create_or_replace(
        api, config_map("zone-a"), same=same_zone("zone-a"), guard=guard
    )
    assert written.outcome is EffectOutcome.REPLACED and seen == ["zone-b"]
    assert ops(api) == ["create", "get", "replace"]
    assert api.objects[("", "ConfigMap", NS, "rec")]["data"] == {"zone": "zone-a"}
    again = await writer.create_or_replace(api, config_map("zone-a"), same=same_zone("zone-a"))
    assert again.outcome is EffectOutcome.EXISTS and ops(api)[-1] == "get"


async def test_a_guard_that_raises_stops_the_replace() -> None:
    api = world(config_map("zone-b"))

    async def guard(_existing: Obj) -> None:
        raise errors.Conflict("not this time")

    with pytest.raises(errors.Conflict, match="not this time"):
        await writer.create_or_replace(api, config_map(), guard=guard)
    assert "replace" not in ops(api)
    assert api.objects[("", "ConfigMap", NS, "rec")]["data"] == {"zone": "zone-b"}


async def test_a_replace_after_someone_else_wrote_is_a_conflict_for_the_caller() -> None:
    api = world(config_map("zone-b"))

    async def meanwhile(existing: Obj) -> None:
        changed = copy.deepcopy(existing)
        changed["data"]["zone"] = "zone-c"
        await api.replace(changed)

    with pytest.raises(errors.Conflict):
        await writer.create_or_replace(api, config_map(), guard=meanwhile)
    assert api.objects[("", "ConfigMap", NS, "rec")]["data"] == {"zone": "zone-c"}


async def test_patch_and_delete_say_what_they_did_or_that_it_was_gone() -> None:
    api = world(config_map())
    stored = api.objects[("", "ConfigMap", NS, "rec")]
    patch = {"metadata": {"annotations": {"a": "b"}}}
    done = await writer.merge_patch(api, stored, patch, done=EffectOutcome.MARKED)
    assert done.outcome is EffectOutcome.MARKED
    stale = copy.deepcopy(stored)
    with pytest.raises(errors.Conflict):  # the stored object changed since: its guard fails
        await writer.delete(api, stale)
    fresh = api.objects[("", "ConfigMap", NS, "rec")]
    assert (await writer.delete(api, fresh)).outcome is EffectOutcome.DELETED
    assert (await writer.delete(api, fresh)).outcome is EffectOutcome.GONE
    gone = await writer.merge_patch(api, fresh, patch, done=EffectOutcome.MARKED)
    assert gone.outcome is EffectOutcome.GONE


async def test_replace_overwrites_under_the_version_the_caller_read() -> None:
    api = world(config_map("zone-a"))
    read = await api.get("v1", "ConfigMap", NS, "rec")
    written = await writer.replace(api, {**read, "data": {"zone": "zone-b"}})
    assert written == writer.Written("ConfigMap", "rec", NS, EffectOutcome.REPLACED)
    assert (await api.get("v1", "ConfigMap", NS, "rec"))["data"] == {"zone": "zone-b"}
    # The same stale version again: refused, nothing written.
    with pytest.raises(errors.Conflict):
        await writer.replace(api, {**read, "data": {"zone": "zone-c"}})
    assert (await api.get("v1", "ConfigMap", NS, "rec"))["data"] == {"zone": "zone-b"}
    assert ops(api) == ["get", "replace", "get", "replace", "get"]  # it reads nothing itself


async def test_replace_of_an_object_gone_says_so() -> None:
    api = world()
    written = await writer.replace(
        api, {**config_map(), "metadata": {"name": "rec", "namespace": NS}}
    )
    assert written.outcome is EffectOutcome.GONE
