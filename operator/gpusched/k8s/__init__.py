"""Kubernetes API adapters (kubernetes_asyncio): the only code that talks to the API server."""
