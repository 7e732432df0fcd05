"""The CRDs on the real kube-apiserver: every example object and every object the operator
creates or writes is accepted, every invalid one is refused by the server itself, naming the
field the offline check (tests/unit/api/test_crd_schemas.py) and the operator name.

Creates are dry runs (`dryRun=All`): the server validates, admits and answers as for a real
write, and stores nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpusched.api import crds
from testing.apiserver import ApiClient, ApiStatusError
from testing.harness import ensure_namespace
from tests.unit.api.test_crd_schemas import (
    BAD,
    EXAMPLES,
    GROUP_STATUS,
    IMMUTABLE,
    MATERIALIZED,
    OPERATOR_ONLY,
    WORKLOAD_STATUS,
    Bad,
    nested,
)

DRY_RUN = {"dryRun": "All", "fieldValidation": "Strict"}


def _create(api: ApiClient, obj: dict[str, Any], **params: str) -> dict[str, Any]:
    ensure_namespace(api, obj["metadata"].get("namespace") or "default")
    spec = api.spec_of(obj)
    path = spec.path(obj["metadata"].get("namespace") or "default")
    answer = api.http.post(path, json=obj, params=params)
    result: dict[str, Any] = api._json(answer)
    return result


def _causes(error: ApiStatusError) -> list[tuple[str, str]]:
    body = error.body if isinstance(error.body, dict) else {}
    causes = (body.get("details") or {}).get("causes") or []
    return [(c.get("field", ""), c.get("message", "")) for c in causes]


@pytest.mark.parametrize(("where", "obj"), EXAMPLES + MATERIALIZED, ids=lambda v: str(v)[:60])
def test_every_example_and_every_object_the_operator_creates_is_accepted(
    where: str, obj: dict[str, Any], api: ApiClient
) -> None:
    created = _create(api, obj, **DRY_RUN)
    assert created["kind"] == obj["kind"], where


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("PodGroup", GROUP_STATUS),
        ("CompositePodGroup", GROUP_STATUS),
        ("Workload", WORKLOAD_STATUS),
    ],
)
def test_the_status_the_operator_writes_is_accepted(kind: str, status: Any, api: ApiClient) -> None:
    (_, obj) = next((w, o) for w, o in MATERIALIZED + EXAMPLES if o["kind"] == kind)
    # Without its owner: the real garbage collector deletes an object whose owner is missing.
    meta = {k: v for k, v in obj["metadata"].items() if k != "ownerReferences"}
    created = _create(api, {**obj, "metadata": meta, "status": {}})
    written = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    meta = created["metadata"]
    plural = api.spec_of(obj).plural
    patched = api.patch(
        plural,
        meta["name"],
        {"status": written},
        meta["namespace"],
        subresource="status",
        group=api_group(),
    )
    assert patched["status"] == written


def api_group() -> str:
    return crds.API_VERSION.split("/")[0]


@pytest.mark.parametrize("bad", BAD, ids=[b.story for b in BAD])
def test_the_real_server_refuses_it_naming_the_field(bad: Bad, api: ApiClient) -> None:
    """A schema or CEL violation is a 422 whose causes name the field (the message is the
    server's own words, or our CEL rule's message); an unknown field, under strict field
    validation, is a 400 naming it in the message."""
    with pytest.raises(ApiStatusError) as refused:
        _create(api, bad.obj, **DRY_RUN)
    if refused.value.status == 400:
        assert f'unknown field "{bad.want_field}' in str(refused.value), refused.value
        return
    assert refused.value.status == 422, refused.value
    causes = _causes(refused.value)
    at_field = [message for field, message in causes if field == bad.want_field]
    assert at_field, f"the server named no cause at {bad.want_field}: {causes}"
    # Messages are the server's own words for schema rules ("Too many: 2: must have at most 1
    # item", where the offline check says "is too long"), our message for CEL rules.
    assert all(message.strip() for message in at_field), causes


@pytest.mark.parametrize(
    ("story", "obj", "operator_field"), OPERATOR_ONLY, ids=[s for s, _, _ in OPERATOR_ONLY]
)
def test_what_only_the_operator_checks_the_real_server_accepts(
    story: str, obj: dict[str, Any], operator_field: str, api: ApiClient
) -> None:
    assert _create(api, obj, **DRY_RUN)["kind"] == obj["kind"], story


def test_the_deepest_nesting_the_operator_allows_is_accepted(api: ApiClient) -> None:
    obj = nested(crds.MAX_TEMPLATE_DEPTH)
    assert _create(api, obj, **DRY_RUN)["kind"] == "Workload"


def test_an_unknown_field_is_refused_under_strict_validation(api: ApiClient) -> None:
    obj = dict(EXAMPLES[0][1])
    obj = {**obj, "spec": {**obj["spec"], "minMember": 3}}
    with pytest.raises(ApiStatusError) as refused:
        _create(api, obj, **DRY_RUN)
    assert refused.value.status == 400, refused.value
    assert 'unknown field "spec.minMember"' in str(refused.value)


@pytest.mark.parametrize(
    ("story", "old", "change", "want_field"), IMMUTABLE, ids=[i[0] for i in IMMUTABLE]
)
def test_the_real_server_refuses_a_change_of_priority_or_disruption_fields(
    story: str, old: dict[str, Any], change: dict[str, Any], want_field: str, api: ApiClient
) -> None:
    """Transition rules (``self == oldSelf``) run on updates only: created for real, then
    patched, the object keeps its fields and the server names the one that may not change."""
    obj = copy.deepcopy(old)
    obj["metadata"]["name"] = f"immutable-{IMMUTABLE.index((story, old, change, want_field))}"
    created = _create(api, obj)
    meta, plural = created["metadata"], api.spec_of(obj).plural
    try:
        with pytest.raises(ApiStatusError) as refused:
            api.patch(plural, meta["name"], {"spec": change}, meta["namespace"], group=api_group())
        assert refused.value.status == 422, refused.value
        assert any(field == want_field for field, _ in _causes(refused.value)), refused.value
    finally:
        api.delete(plural, meta["name"], meta["namespace"], group=api_group())
