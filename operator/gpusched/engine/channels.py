"""The NVIDIA DRA driver's rules for IMEX channels (its ComputeDomain half), as data.

The driver enforces them when it prepares a claim, on the node, after the bind: a placement
that breaks one binds, then the pod never starts. gpusched filters on them instead, and names
the rule wherever it keeps a pod or a gang off a node (`gpusched.engine.wording.channel_rule`
renders the sentence).
"""

from __future__ import annotations

from enum import StrEnum


class ChannelRule(StrEnum):
    """A rule the driver's Prepare enforces on channel claims."""

    ONE_POD_PER_NODE = "OnePodPerNode"
    """A node's channel is prepared for one pod at a time: one channel pod a node."""
    ONE_DOMAIN_PER_NODE = "OneDomainPerNode"
    """A node serves one ComputeDomain at a time (label ``resource.nvidia.com/computeDomain``)."""
    CLAIM_NAMESPACE = "ClaimNamespace"
    """A channel claim must be in the namespace of the ComputeDomain its config names."""
