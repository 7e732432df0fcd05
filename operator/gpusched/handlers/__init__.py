"""Kopf handlers: thin adapters that parse an object, call a service, and patch status."""
