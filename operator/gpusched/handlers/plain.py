"""For plain ``kopf run -m gpusched.handlers.plain``: importing this module makes the
operator's registry Kopf's default, which is where ``kopf run`` looks for handlers. That is
its one effect; ``gpusched run`` and the tests hand Kopf the registry instead."""

from __future__ import annotations

import kopf

from gpusched.handlers import registry

kopf.set_default_registry(registry)
