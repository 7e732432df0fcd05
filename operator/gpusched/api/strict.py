"""Strict field validation for the parts of a Pod the scheduler reads, as the API server's
``kubectl apply --validate=strict`` does it.

The models in `gpusched.api.k8s` ignore unknown fields, because a live cluster's objects grow
new fields every release and the API server has already refused the unknown ones. A file a
person hands to ``simulate`` or ``explain -f`` has been through no API server: there, a typo
(``resources.requets``) would silently drop what it meant (the pod placed with no GPU). The
loader of those files runs `check_pod_fields` on every Pod, with the field names of the
Kubernetes API (v1.34); fields we do not read (``ports``, ``env``, ``volumes``) are allowed,
not looked into.
"""

from __future__ import annotations

from collections.abc import Mapping
from difflib import get_close_matches
from typing import Any

from gpusched.api.errors import InvalidObjectError, format_field_path

_Schema = Mapping[str, "_Schema | None"]
"""Known field → the schema of its value (a mapping, or a list of mappings), or ``None``
when the value is not looked into."""


def _unread(names: str) -> dict[str, None]:
    """Known fields, space-separated, whose values the scheduler does not look into."""
    return dict.fromkeys(names.split())


_REQUIREMENT: _Schema = {"key": None, "operator": None, "values": None}
_TERM: _Schema = {"matchExpressions": _REQUIREMENT, "matchFields": _REQUIREMENT}
_NODE_AFFINITY: _Schema = {
    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": _TERM},
    "preferredDuringSchedulingIgnoredDuringExecution": {"weight": None, "preference": _TERM},
}
_AFFINITY: _Schema = {"nodeAffinity": _NODE_AFFINITY, "podAffinity": None, "podAntiAffinity": None}
_RESOURCES: _Schema = {"limits": None, "requests": None, "claims": None}
_TOLERATION: _Schema = {
    "key": None,
    "operator": None,
    "value": None,
    "effect": None,
    "tolerationSeconds": None,
}
_CONTAINER: _Schema = {
    "resources": _RESOURCES,
    **_unread(
        "name image command args workingDir ports envFrom env resizePolicy restartPolicy "
        "restartPolicyRules volumeMounts volumeDevices livenessProbe readinessProbe "
        "startupProbe lifecycle terminationMessagePath terminationMessagePolicy "
        "imagePullPolicy securityContext stdin stdinOnce tty"
    ),
}
_METADATA: _Schema = _unread(
    "name generateName namespace selfLink uid resourceVersion generation creationTimestamp "
    "deletionTimestamp deletionGracePeriodSeconds labels annotations ownerReferences "
    "finalizers managedFields"
)
_POD_SPEC: _Schema = {
    "containers": _CONTAINER,
    "initContainers": _CONTAINER,
    "resources": _RESOURCES,
    "affinity": _AFFINITY,
    "tolerations": _TOLERATION,
    "schedulingGroup": {"podGroupName": None},
    **_unread(
        "activeDeadlineSeconds automountServiceAccountToken dnsConfig dnsPolicy "
        "enableServiceLinks ephemeralContainers hostAliases hostIPC hostNetwork hostPID "
        "hostUsers hostname hostnameOverride imagePullSecrets nodeName nodeSelector os "
        "overhead preemptionPolicy priority priorityClassName readinessGates "
        "resourceClaims restartPolicy runtimeClassName schedulerName schedulingGates "
        "securityContext serviceAccount serviceAccountName setHostnameAsFQDN "
        "shareProcessNamespace subdomain terminationGracePeriodSeconds "
        "topologySpreadConstraints volumes"
    ),
}
_POD: _Schema = {
    "apiVersion": None,
    "kind": None,
    "metadata": _METADATA,
    "spec": _POD_SPEC,
    "status": None,
}


def check_pod_fields(raw: Mapping[str, Any], obj: str) -> None:
    """Raises `InvalidObjectError` for ``obj`` (``Pod ns/name``) naming the first unknown field
    of the parts of the Pod the scheduler reads. Values of the wrong type are left to the
    model, which names them."""
    _check(raw, _POD, obj, ())


def _check(value: object, schema: _Schema, obj: str, path: tuple[str | int, ...]) -> None:
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check(item, schema, obj, (*path, index))
        return
    if not isinstance(value, Mapping):
        return
    for name, item in value.items():
        if name not in schema:
            raise InvalidObjectError(
                obj, format_field_path((*path, str(name))), _unknown(str(name), schema)
            )
        inner = schema[name]
        if inner is not None:
            _check(item, inner, obj, (*path, name))


def _unknown(name: str, schema: _Schema) -> str:
    """``unknown field``, with the field probably meant, or the known ones when they are few."""
    close = get_close_matches(name, list(schema), n=1, cutoff=0.6)
    if close:
        return f"unknown field (did you mean {close[0]}?)"
    if len(schema) <= 8:
        return f"unknown field (known: {', '.join(sorted(schema))})"
    return "unknown field"
