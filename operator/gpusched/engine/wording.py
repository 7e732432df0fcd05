"""The engine's sentences, rendered in this one place from the data of its decisions
(`gpusched.engine.result`): the status ``lastAttempt`` message and domain lines, the reasons
of pods left pending. Nothing parses them back: whoever needs a number reads the data."""

from __future__ import annotations

from collections.abc import Sequence

from gpusched.engine.channels import ChannelRule
from gpusched.engine.partitions import PartitionRefusal
from gpusched.engine.result import (
    Attempt,
    ChildBound,
    Counted,
    EmptyLabel,
    NodeCheck,
    SegmentCount,
    SegmentPlaced,
    Waiting,
)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 pod``, ``3 pods``."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


# ----- nodes -----------------------------------------------------------------------------------


BROKEN_TOPOLOGY = "invalid GPU topology annotation: single-GPU pods only"
NO_GPU_SHARE = "no GPU with enough milli-GPU free"


def insufficient(resource: str) -> str:
    """A node check on one resource, named as kube-scheduler's NodeResourcesFit names it."""
    return f"Insufficient {resource}"


def no_node_has(resource: str) -> str:
    return f"no node has {resource}"


def node_reasons(check: NodeCheck) -> str:
    """ "2 nodes fit (node-d ×2, …); 8 Insufficient nvidia.com/gpu: node-a (0 free usable GPUs,
    needs 4), node-b (…), …; 4 Insufficient memory: node-c (…); 3 more nodes for other
    reasons": every check that blocks, with its count of nodes, as kube-scheduler lists its
    filters ("0/12 nodes are available: 8 Insufficient nvidia.com/gpu, 4 …")."""
    parts = []
    if check.fitting:
        more = ", …" if check.fitting > len(check.fitting_examples) else ""
        verb = "node fits" if check.fitting == 1 else "nodes fit"
        limits = "".join(f"; one pod each: {channel_rule(r)}" for r in check.limits)
        parts.append(f"{check.fitting} {verb} ({', '.join(check.fitting_examples)}{more}{limits})")
    for blocker in check.blockers:
        more = ", …" if blocker.nodes > len(blocker.examples) else ""
        parts.append(f"{blocker.nodes} {blocker.check}: {', '.join(blocker.examples)}{more}")
    if check.others:
        parts.append(f"{check.others} more nodes for other reasons")
    parts.extend(f"DRA node {node}: {why}" for node, why in check.device_problems)
    return "; ".join(parts) if parts else "no nodes"


def none_available(total: int, check: NodeCheck) -> str:
    """Why a pod without a group fits no node of the cluster."""
    return f"0/{total} nodes are available: {node_reasons(check)}"


def left_out(total: int, domain: str | None, check: NodeCheck) -> str:
    """Why a pod of a placed group did not fit beside the others in ``domain`` (None: the
    whole cluster)."""
    where = f" of {domain}" if domain is not None else ""
    return (
        f"0/{total} nodes{where} are available beside its group's other pods: {node_reasons(check)}"
    )


def no_label(key: str, group: str | None, suggestion: str | None, levels: Sequence[str]) -> str:
    """No node carries a group's topology key (``group``: the child group it is set on, when
    said on its parent), with the closest known key, and the configured levels when the key
    is not one of them."""
    whose = f"{group}: " if group is not None else ""
    hint = f"; did you mean {suggestion}?" if suggestion is not None else ""
    listed = f" (topologyLevels: {', '.join(levels)})" if levels and key not in levels else ""
    return f"{whose}no node has label {key}{hint}{listed}"


# ----- one domain tried ------------------------------------------------------------------------


def summary(attempt: Attempt) -> str:
    """Why the domain did not take the group, in short (or that it did)."""
    if attempt.empty_label is not None:
        return empty_label(attempt.empty_label)
    if attempt.note:
        return attempt.note
    if attempt.fits:
        return "fits"
    if attempt.segments is not None:
        return segment_count(attempt.segments)
    counts = f"{attempt.fit} of {attempt.needed} {attempt.counted.value}"
    if attempt.counted is Counted.PODS:
        return f"at most {counts} fit" if attempt.estimate else f"{counts} fit"
    if attempt.estimate:
        return f"at most {counts} could fit ({_bounds(attempt.bounds)})"
    failed = "; ".join(f"{name}: {message}" for name, message in attempt.children)
    return f"{counts} fit" + (f" ({failed})" if failed else "")


def empty_label(empty: EmptyLabel) -> str:
    """ "in no nvidia.com/gpu.clique domain: 2 nodes have it empty (gb-1, gb-2)"."""
    parts: list[str] = []
    if empty.nodes:
        more = ", …" if empty.nodes > len(empty.examples) else ""
        have = "node has" if empty.nodes == 1 else "nodes have"
        names = ", ".join(empty.examples)
        parts.append(f"{empty.nodes} {have} it empty ({names}{more})")
    if empty.mixed:
        more = ", …" if empty.mixed > len(empty.mixed_examples) else ""
        whose = "node's" if empty.mixed == 1 else "nodes'"
        names = ", ".join(empty.mixed_examples)
        cliques = ", ".join(empty.cliques)
        parts.append(
            f"{empty.mixed} {whose} GPUs name different cliques ({names}{more}: {cliques})"
        )
    return f"in no {empty.key} domain: " + "; ".join(parts)


def segment_count(count: SegmentCount) -> str:
    """ "1 of 2 segments of 18 pods fit, each in one nvidia.com/gpu.clique domain"."""
    return (
        f"{count.fit} of {count.needed} segments of {count.size} pods fit, "
        f"each in one {count.key} domain"
    )


def segments_placed(segments: Sequence[SegmentPlaced]) -> str:
    """ "as 2 segments: <clique-1> (18 pods), <clique-2> (18 pods)"."""
    parts = ", ".join(f"{s.domain} ({len(s.pods)} pods)" for s in segments)
    noun = "segment" if len(segments) == 1 else "segments"
    return f"as {len(segments)} {noun}: {parts}"


def _bounds(bounds: Sequence[ChildBound]) -> str:
    parts = []
    for bound in bounds:
        where = f"{bound.topology_key} domains" if bound.topology_key else "room"
        parts.append(f"{bound.children} × {bound.needed}-pod gang: {where} for {bound.room}")
    return "; ".join(parts)


def short(attempt: Attempt) -> str:
    """``domain: summary``."""
    text = summary(attempt)
    return text if attempt.domain is None else f"{attempt.domain}: {text}"


def full(attempt: Attempt) -> str:
    """``domain: summary: why the nodes refused``."""
    if attempt.nodes is not None:
        return f"{short(attempt)}: {node_reasons(attempt.nodes)}"
    if attempt.no_pods:
        return f"{short(attempt)}: no pods"
    return short(attempt)


def within(attempt: Attempt, parent: str | None, in_full: bool) -> str:
    """The line inside a message that already says "in ``parent``" (None: the whole cluster,
    which is never named)."""
    text = full(attempt) if in_full else short(attempt)
    if parent is not None and attempt.domain == parent:
        return text.removeprefix(f"{attempt.domain}: ")
    return text


# ----- a group's message -----------------------------------------------------------------------


def waiting(wait: Waiting) -> str:
    """What a group short of pods or child groups waits for."""
    if wait.counted is Counted.CHILD_GROUPS:
        verb = "have their pods" if wait.ready else "exist"
        return f"{wait.present} of {wait.minimum} child groups {verb} (minGroupCount)"
    are = "is" if wait.gated == 1 else "are"
    also = f"; {wait.gated} more {are} held back by scheduling gates" if wait.gated else ""
    if wait.minimum is not None:
        return f"{wait.present} of {wait.minimum} valid pods exist (minCount {wait.minimum}){also}"
    return f"no valid pods exist{also}"


def no_placement(parent: str | None, attempts: Sequence[Attempt], more: int) -> str:
    """The message of a group placed nowhere in ``parent`` (None: in any domain): every
    domain tried with why in short, or the one domain tried in full; then ``more`` domains
    not shown, counted."""
    said = [within(a, parent, in_full=len(attempts) == 1 and not more) for a in attempts]
    summary_ = "; ".join(said)
    if more:
        summary_ += f"; {more_domains(more)}"
    where = f"in {parent}" if parent is not None else "in any domain"
    return f"no placement {where}" + (f": {summary_}" if summary_ else "")


def more_domains(count: int) -> str:
    return f"… {count} more domains"


def attempt_lines(attempts: Sequence[Attempt], more: int) -> tuple[str, ...]:
    """The ``domains`` of a status: each attempt in full, then the domains not shown."""
    lines = [full(a) for a in attempts]
    return (*lines, more_domains(more)) if more else tuple(lines)


def inherited(kind: str, key: str, message: str) -> str:
    """The message of a group that shares its ancestor's decision."""
    return f"{kind} {key}: {message}"


def placed(done: int, of: int, counted: Counted, domain: str) -> str:
    if of == 0 and counted is Counted.PODS:
        return f"no pod pending; its pods are bound in {domain}"
    noun = "pending pods" if counted is Counted.PODS else "child groups"
    return f"{done} of {of} {noun} placed in {domain}"


def beside_siblings(domain: str) -> str:
    return f"did not fit beside its sibling groups in {domain}"


# ----- DRA devices ------------------------------------------------------------------------------

DRA_DRIVER = "gpu.nvidia.com"
DRA_NODE_FOR_PLUGIN_POD = (
    f"its GPUs are {DRA_DRIVER} devices (ResourceSlices); the pod asks for nvidia.com/gpu, "
    "which the node does not advertise"
)
NO_DRA_DEVICES = f"publishes no {DRA_DRIVER} devices for the pod's ResourceClaims"
FREE_DRA_DEVICES = f"insufficient free {DRA_DRIVER} devices"


DRA_DEVICES_UNUSABLE = f"none of its {DRA_DRIVER} devices can be used"
"""A DRA node none of whose devices can be allocated (why: `NodeCheck.device_problems`)."""


def dra_selector_fails(check: str) -> str:
    """A DRA node where some device fails a check of the pod's claims."""
    return f"not every device passes the claims' selector {check}"


def fm_partition(refusal: PartitionRefusal) -> str:
    """A Fabric Manager partitioned node that cannot give a pod's GPUs as one partition."""
    sizes = ", ".join(map(str, refusal.sizes)) or "none"
    if refusal.claims > 1:
        return (
            f"its GPUs are in Fabric Manager partitions (partitionN attributes): the pod's "
            f"{refusal.claims} GPU claims would each need a partition of their own; gpusched "
            "gives a pod one partition, so ask for its GPUs in one claim"
        )
    return (
        f"its GPUs are in Fabric Manager partitions of {sizes} GPUs (partitionN attributes) "
        f"and the driver prepares only a whole partition: none has {refusal.gpus}"
    )


CHANNEL_TAKEN = "IMEX channel taken"
"""The node check a channel pod fails where another pod holds the node's channel."""


def channel_rule(rule: ChannelRule) -> str:
    """The NVIDIA driver's rule on IMEX channels, as a clause naming it."""
    if rule is ChannelRule.ONE_POD_PER_NODE:
        return "the NVIDIA driver prepares a node's IMEX channel for one pod at a time"
    if rule is ChannelRule.ONE_DOMAIN_PER_NODE:
        return "the NVIDIA driver lets a node serve one ComputeDomain at a time"
    return "the NVIDIA driver prepares a channel only for a claim in its ComputeDomain's namespace"


def channel_taken(holder: str) -> str:
    """Why a node's channel is not free: who holds it, and the rule."""
    held = f"held by {holder}" if holder else "held by another pod"
    return f"{held}; {channel_rule(ChannelRule.ONE_POD_PER_NODE)}"


def serves_other_domain(uid: str) -> str:
    """A node the ComputeDomain plugin labelled for another ComputeDomain than the pod's."""
    return (
        f"it serves ComputeDomain {uid} (label resource.nvidia.com/computeDomain): "
        f"{channel_rule(ChannelRule.ONE_DOMAIN_PER_NODE)}"
    )


def channel_namespace(claim: str, position: int, namespace: str, name: str) -> str:
    """A channel claim whose config names a ComputeDomain of another namespace."""
    return (
        f"ResourceClaim {claim}: spec.devices.config[{position}].opaque.parameters.domainID "
        f"names ComputeDomain {namespace}/{name}, in another namespace; "
        f"{channel_rule(ChannelRule.CLAIM_NAMESPACE)}"
    )


def no_free_partition(gpus: int) -> str:
    """A Fabric Manager partitioned node whose every partition of the pod's size is in use."""
    return f"no free Fabric Manager partition of {gpus} {DRA_DRIVER} devices"


def joined_elsewhere(claims: Sequence[str]) -> str:
    """A node the shared claims a pod joins were not allocated on."""
    named = ", ".join(claims)
    return f"its shared ResourceClaim {named} is allocated on another node"


def too_many_devices(count: int, most: int) -> str:
    """A pod whose claims ask for more GPUs than any node has."""
    return f"its ResourceClaims ask for {count} {DRA_DRIVER} devices; the largest node has {most}"


def claim_refused(pod: str, why: str) -> str:
    """A pod whose claims cannot be allocated now, and why (an `Attempt` note)."""
    return f"{pod}: {why}"


def claims_refused(refused: Sequence[Attempt]) -> str:
    """A group some of whose pods' claims cannot be allocated: each pod and why."""
    return "; ".join(summary(a) for a in refused)


# ----- preemption ------------------------------------------------------------------------------


def eviction(pods: int, units: int, domain: str, cost: str) -> str:
    """A preemption plan: ``units`` are what goes whole (a gang, or a lone pod)."""
    whole = (
        "" if units == pods else f" ({counted(units, 'gang or pod', 'gangs or pods')}, each whole)"
    )
    return f"evict {counted(pods, 'pod')}{whole} in {domain}: {cost}"
