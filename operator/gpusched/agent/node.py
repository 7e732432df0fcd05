"""Writes the ``gpusched.io/gpu-topology`` annotation on the agent's own Node.

The live Node is read before each write and patched only when its value differs, so an
unchanged topology costs one GET per interval and no write, and an annotation removed or edited
by hand is put back at the next interval. The patch names this annotation alone (a strategic
merge patch, which merges annotations key by key).
"""

from __future__ import annotations

from kubernetes_asyncio import client

from gpusched.api.topology import TOPOLOGY_ANNOTATION

__all__ = ["NodeAnnotator"]


class NodeAnnotator:
    def __init__(self, api: client.CoreV1Api, node_name: str) -> None:
        self._api = api
        self.node_name = node_name

    async def current(self, key: str = TOPOLOGY_ANNOTATION) -> str | None:
        node = await self._api.read_node(self.node_name)
        annotations = node.metadata.annotations if node.metadata is not None else None
        value: str | None = (annotations or {}).get(key)
        return value

    async def publish(self, value: str, key: str = TOPOLOGY_ANNOTATION) -> bool:
        """Sets the annotation ``key`` to ``value``; returns whether a patch was needed."""
        if await self.current(key) == value:
            return False
        body = {"metadata": {"annotations": {key: value}}}
        await self._api.patch_node(self.node_name, body)
        return True
