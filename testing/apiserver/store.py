"""The object store: objects, resource versions, the bounded event log and watchers.

Everything here is synchronous and runs on the emulator's event loop thread only
(the server thread); other threads go through `ApiServer.call()`. No locks needed.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import datetime
import json
import secrets
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import errors
from .patches import apply_patch
from .resources import BUILTIN_RESOURCES, CRDS, PODS, ResourceSpec, spec_from_crd

Obj = dict[str, Any]
ObjKey = tuple[tuple[str, str], str | None, str]  # ((group, plural), namespace, name)

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # as the real server: no vowels, no 0/1/3


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What counts for `generation`: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


@dataclass(slots=True)
class Event:
    """One change in the cluster, as kept in the event log and sent to watchers."""

    rv: int
    key: tuple[str, str]
    type: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    old: Obj | None
    _raw: bytes | None = None

    @property
    def namespace(self) -> str | None:
        ns: str | None = self.obj["metadata"].get("namespace")
        return ns

    def raw_object(self) -> bytes:
        """The object's JSON, encoded once however many watchers receive it."""
        if self._raw is None:
            self._raw = json.dumps(self.obj, separators=(",", ":")).encode()
        return self._raw


@dataclass(eq=False)
class Watcher:
    """An open watch stream: receives every event of its resource (filtered by the stream)."""

    key: tuple[str, str]
    #: events, or "eof" (end the stream cleanly) / "abort" (cut the connection)
    queue: asyncio.Queue[Event | str] = field(default_factory=asyncio.Queue)

    def close(self, *, abort: bool = False) -> None:
        self.queue.put_nowait("abort" if abort else "eof")


class Gone(Exception):  # noqa: N818 - named like the HTTP status it stands for
    """The requested resourceVersion is older than the event log keeps."""


class Store:
    def __init__(self, *, event_log_size: int = 10_000, garbage_collection: bool = True) -> None:
        self.garbage_collection = garbage_collection
        #: uid -> where the object lives; owner uid -> its dependents (ownerReferences)
        self.uids: dict[str, ObjKey] = {}
        self.dependents: dict[str, set[ObjKey]] = collections.defaultdict(set)
        self.specs: dict[tuple[str, str], ResourceSpec] = {}
        self.objects: dict[tuple[str, str], dict[tuple[str | None, str], Obj]] = {}
        self.rv = 1
        #: resourceVersions <= this are no longer in the log: watching from them is 410 Gone
        self.compacted_rv = 0
        self.log: collections.deque[Event] = collections.deque(maxlen=event_log_size)
        self.watchers: dict[tuple[str, str], set[Watcher]] = collections.defaultdict(set)
        self.listeners: list[Callable[[], None]] = []
        for spec in BUILTIN_RESOURCES:
            self.register(spec)

    # -- resources ---------------------------------------------------------------------------

    def register(self, spec: ResourceSpec) -> None:
        self.specs[spec.key] = spec
        self.objects.setdefault(spec.key, {})
        for listener in self.listeners:
            listener()

    def unregister(self, group: str, plural: str) -> None:
        spec = self.specs.pop((group, plural), None)
        for obj in self.objects.pop((group, plural), {}).values():
            self.uids.pop(obj["metadata"]["uid"], None)
        for watcher in list(self.watchers.pop((group, plural), ())):
            watcher.close()
        if spec is not None:
            for listener in self.listeners:
                listener()

    def find_spec(self, group: str, version: str, plural: str) -> ResourceSpec | None:
        spec = self.specs.get((group, plural))
        if spec is None or spec.version != version:
            return None
        return spec

    def spec_for(self, api_version: str, kind: str) -> ResourceSpec:
        for spec in self.specs.values():
            if spec.api_version == api_version and spec.kind == kind:
                return spec
        raise errors.bad_request(f"no resource for {api_version} {kind}")

    # -- reading -----------------------------------------------------------------------------

    def get(self, spec: ResourceSpec, namespace: str | None, name: str) -> Obj:
        obj = self.objects[spec.key].get((namespace if spec.namespaced else None, name))
        if obj is None:
            raise errors.not_found(spec.plural, name, spec.group)
        return obj

    def iter_objects(
        self, spec: ResourceSpec, namespace: str | None, match: Callable[[Obj], bool]
    ) -> Iterator[Obj]:
        for (ns, _), obj in self.objects[spec.key].items():
            if (namespace is None or ns == namespace) and match(obj):
                yield obj

    # -- writing -----------------------------------------------------------------------------

    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _emit(self, spec: ResourceSpec, type_: str, obj: Obj, old: Obj | None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        if len(self.log) == self.log.maxlen and self.log:
            self.compacted_rv = self.log[0].rv
        event = Event(rv, spec.key, type_, obj, old)
        self.log.append(event)
        for watcher in self.watchers.get(spec.key, ()):
            watcher.queue.put_nowait(event)

    def _generate_name(self, spec: ResourceSpec, namespace: str | None, prefix: str) -> str:
        for _ in range(100):
            name = prefix + "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))
            if (namespace, name) not in self.objects[spec.key]:
                return name
        raise errors.api_error(500, "InternalError", "could not generate a unique name")

    def create(self, spec: ResourceSpec, namespace: str | None, body: Obj) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if spec.namespaced:
            body_ns = meta.get("namespace")
            if namespace is not None and body_ns is not None and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            namespace = namespace or body_ns or "default"
            meta["namespace"] = namespace
        else:
            namespace = None
            meta.pop("namespace", None)
        name = meta.get("name")
        if not name:
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.invalid(
                    spec.kind, "", "metadata.name: Required value: name or generateName is required"
                )
            name = meta["name"] = self._generate_name(spec, namespace, prefix)
        if (namespace, name) in self.objects[spec.key]:
            raise errors.already_exists(spec.plural, name, spec.group)
        obj["apiVersion"] = spec.api_version
        obj["kind"] = spec.kind
        for server_field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(server_field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta["generation"] = 1
        meta["resourceVersion"] = str(self._next_rv())
        if spec.status_subresource:
            if spec.status_on_create == "drop":
                obj.pop("status", None)
            elif isinstance(spec.status_on_create, dict):
                obj["status"] = copy.deepcopy(spec.status_on_create)
        if spec.key == CRDS.key:
            self._crd_created(obj)
        self.objects[spec.key][(namespace, name)] = obj
        self._index(spec, obj, None)
        self._emit(spec, "ADDED", obj, None)
        return obj

    def _commit_update(self, spec: ResourceSpec, old: Obj, new: Obj, *, status_only: bool) -> Obj:
        """Store `new` as the next version of `old`; keep server-owned fields; emit the event."""
        old_meta = old["metadata"]
        if status_only:
            # The status subresource changes `status` and nothing else.
            result = {k: v for k, v in old.items() if k != "status"}
            if "status" in new:
                result["status"] = new["status"]
            result["metadata"] = dict(old_meta)
            new = result
        else:
            if spec.status_subresource:
                new.pop("status", None)
                if "status" in old:
                    new["status"] = old["status"]
            meta = new.get("metadata")
            if not isinstance(meta, dict):
                meta = new["metadata"] = {}
            for key in ("uid", "creationTimestamp", "name", "namespace", "generation"):
                if key in old_meta:
                    meta[key] = old_meta[key]
                else:
                    meta.pop(key, None)
            for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                if key in old_meta:
                    meta[key] = old_meta[key]
                else:
                    meta.pop(key, None)
            new["apiVersion"] = spec.api_version
            new["kind"] = spec.kind
            if old_meta.get("deletionTimestamp") and len(meta.get("finalizers") or []) > len(
                old_meta.get("finalizers") or []
            ):
                raise errors.invalid(
                    spec.kind,
                    old_meta["name"],
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the "
                    "object is being deleted",
                )
        if new == old:
            return old  # a no-op update changes nothing, not even the resourceVersion
        if not status_only and _spec_part(new) != _spec_part(old):
            new["metadata"]["generation"] = int(old_meta.get("generation", 1)) + 1
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        ns = new["metadata"].get("namespace") if spec.namespaced else None
        name = new["metadata"]["name"]
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            # The last finalizer is gone: the object goes away.
            del self.objects[spec.key][(ns, name)]
            self._emit(spec, "DELETED", new, old)
            self._removed(spec, new)
            return new
        self.objects[spec.key][(ns, name)] = new
        self._index(spec, new, old)
        self._emit(spec, "MODIFIED", new, old)
        return new

    @staticmethod
    def _check_precondition(spec: ResourceSpec, old: Obj, rv: Any) -> None:
        if rv not in (None, "") and str(rv) != old["metadata"]["resourceVersion"]:
            raise errors.conflict(
                spec.plural,
                old["metadata"]["name"],
                "the object has been modified; please apply your changes to the latest "
                "version and try again",
                spec.group,
            )

    def replace(
        self,
        spec: ResourceSpec,
        namespace: str | None,
        name: str,
        body: Obj,
        *,
        status_only: bool = False,
    ) -> Obj:
        old = self.get(spec, namespace, name)
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        meta = body.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise errors.bad_request("the name of the object does not match the name on the URL")
        self._check_precondition(spec, old, meta.get("resourceVersion"))
        new = copy.deepcopy(body)
        return self._commit_update(spec, old, new, status_only=status_only)

    def patch(
        self,
        spec: ResourceSpec,
        namespace: str | None,
        name: str,
        content_type: str,
        patch: Any,
        *,
        status_only: bool = False,
    ) -> Obj:
        old = self.get(spec, namespace, name)
        new = apply_patch(content_type, copy.deepcopy(old), patch)
        if isinstance(patch, dict):
            self._check_precondition(
                spec, old, (patch.get("metadata") or {}).get("resourceVersion")
            )
        return self._commit_update(spec, old, new, status_only=status_only)

    def delete(
        self,
        spec: ResourceSpec,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any] | None = None,
    ) -> Obj:
        old = self.get(spec, namespace, name)
        preconditions = (options or {}).get("preconditions") or {}
        self._check_precondition(spec, old, preconditions.get("resourceVersion"))
        uid = preconditions.get("uid")
        if uid and uid != old["metadata"]["uid"]:
            raise errors.conflict(
                spec.plural, name, "Precondition failed: UID mismatch", spec.group
            )
        meta = old["metadata"]
        ns = meta.get("namespace") if spec.namespaced else None
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return old  # already being deleted: nothing changes
            new = {**old, "metadata": {**meta, "deletionTimestamp": now_rfc3339()}}
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["metadata"]["resourceVersion"] = str(self._next_rv())
            self.objects[spec.key][(ns, name)] = new
            self._emit(spec, "MODIFIED", new, old)
            return new
        new = {**old, "metadata": {**meta, "resourceVersion": str(self._next_rv())}}
        del self.objects[spec.key][(ns, name)]
        self._emit(spec, "DELETED", new, old)
        self._removed(spec, new)
        return new

    def bind(self, namespace: str, name: str, binding: Obj) -> None:
        """`POST pods/{name}/binding`: assign the pod to a node, atomically with annotations."""
        if not isinstance(binding, dict):
            raise errors.bad_request("the request body must be a v1 Binding")
        target = binding.get("target") or {}
        node = target.get("name")
        if not node:
            raise errors.invalid("Binding", name, "target.name: Required value")
        if target.get("kind") not in (None, "", "Node"):
            raise errors.invalid("Binding", name, "target.kind: must be Node")
        pod = self.get(PODS, namespace, name)
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            raise errors.conflict(
                "pods", name, "pod is being deleted, cannot be assigned to a host"
            )
        assigned = (pod.get("spec") or {}).get("nodeName")
        if assigned:
            raise errors.conflict(
                "pods", name, f"pod {name} is already assigned to node {assigned!r}"
            )
        uid = (binding.get("metadata") or {}).get("uid")
        if uid and uid != meta["uid"]:
            raise errors.conflict("pods", name, "Precondition failed: UID mismatch")
        new = copy.deepcopy(pod)
        new["spec"] = {**(new.get("spec") or {}), "nodeName": node}
        annotations = (binding.get("metadata") or {}).get("annotations") or {}
        if annotations:
            new["metadata"]["annotations"] = {
                **(new["metadata"].get("annotations") or {}),
                **annotations,
            }
        status = new.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(),
            }
        )
        status["conditions"] = conditions
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        self.objects[PODS.key][(namespace, name)] = new
        self._emit(PODS, "MODIFIED", new, pod)

    # -- garbage collection by ownerReferences -----------------------------------------------

    @staticmethod
    def _owners(obj: Obj | None) -> set[str]:
        if obj is None:
            return set()
        refs = obj["metadata"].get("ownerReferences") or []
        return {ref["uid"] for ref in refs if isinstance(ref, dict) and ref.get("uid")}

    def _index(self, spec: ResourceSpec, obj: Obj, old: Obj | None) -> None:
        meta = obj["metadata"]
        where: ObjKey = (spec.key, meta.get("namespace") if spec.namespaced else None, meta["name"])
        self.uids[meta["uid"]] = where
        before, after = self._owners(old), self._owners(obj)
        for uid in before - after:
            self.dependents.get(uid, set()).discard(where)
        for uid in after - before:
            self.dependents[uid].add(where)

    def _removed(self, spec: ResourceSpec, obj: Obj) -> None:
        """The object is gone for good: unregister a CRD's resources; collect dependents."""
        self._maybe_crd_deleted(spec, obj)
        uid = obj["metadata"]["uid"]
        self.uids.pop(uid, None)
        for owner in self._owners(obj):
            self.dependents.get(owner, set()).discard(
                (spec.key, obj["metadata"].get("namespace"), obj["metadata"]["name"])
            )
        dependents = self.dependents.pop(uid, set())
        if not self.garbage_collection:
            return
        for key, ns, name in sorted(dependents, key=str):
            child = self.objects.get(key, {}).get((ns, name))
            if (
                child is None
                or key not in self.specs
                or any(owner in self.uids for owner in self._owners(child))
            ):
                continue  # gone already, or another owner still exists
            if not child["metadata"].get("deletionTimestamp"):
                self.delete(self.specs[key], ns, name)

    # -- CRDs register their resources -------------------------------------------------------

    def _crd_created(self, crd: Obj) -> None:
        try:
            specs = spec_from_crd(crd)
        except (KeyError, TypeError) as exc:
            name = crd["metadata"]["name"]
            raise errors.invalid("CustomResourceDefinition", name, str(exc)) from exc
        for spec in specs:
            self.register(spec)

    def _maybe_crd_deleted(self, spec: ResourceSpec, obj: Obj) -> None:
        if spec.key != CRDS.key:
            return
        body = obj.get("spec") or {}
        group = body.get("group")
        plural = (body.get("names") or {}).get("plural")
        if group and plural and (group, plural) in self.specs:
            self.unregister(group, plural)

    # -- watching ----------------------------------------------------------------------------

    def events_since(self, key: tuple[str, str], rv: int) -> list[Event]:
        """Events of one resource after `rv`, oldest first; `Gone` if the log lost some."""
        if rv < self.compacted_rv:
            raise Gone(f"too old resource version: {rv} ({self.compacted_rv + 1})")
        events: list[Event] = []
        for event in reversed(self.log):
            if event.rv <= rv:
                break
            if event.key == key:
                events.append(event)
        events.reverse()
        return events

    def add_watcher(self, key: tuple[str, str]) -> Watcher:
        watcher = Watcher(key)
        self.watchers[key].add(watcher)
        return watcher

    def remove_watcher(self, watcher: Watcher) -> None:
        self.watchers.get(watcher.key, set()).discard(watcher)

    def expire(self) -> None:
        """Forget the event log: watching from any resourceVersion before now is 410 Gone."""
        self.compacted_rv = self.rv
        self.log.clear()
