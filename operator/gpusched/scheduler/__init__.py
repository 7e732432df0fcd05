"""The scheduling service: cluster state, the one scheduling loop, status and Events.

It knows nothing of Kopf (handlers feed it) nor of kubernetes_asyncio (it talks to the API
server through the `ClusterApi` protocol, implemented in `gpusched.k8s`), so it is tested with
both the real adapters over HTTP and without any API at all.
"""
