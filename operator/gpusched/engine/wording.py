"""The engine's sentences, rendered in this one place from the data of its decisions
(`gpusched.engine.result`): the status ``lastAttempt`` message and domain lines, the reasons
of pods left pending. Nothing parses them back: whoever needs a number reads the data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from gpusched.engine.channels import ChannelRule
from gpusched.engine.partitions import PartitionRefusal
from gpusched.engine.result import (
    Attempt,
    ChildBound,
    Counted,
    EmptyLabel,
    NodeCheck,
    PinnedApart,
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
NODE_EXCLUDED = "excluded: a GPU failed a telemetry check"
NOT_BESIDE_GROUP = "not placed beside its group's other pods"
GROUP_NOT_ATTEMPTED = "its group was not attempted"

# What a preemption trial found short of a plan.
NOTHING_LOWER_HELD = "nothing of lower priority is held there"
NOT_ATTEMPTED = "not attempted"
WORSE_LINKS = "fits only on worse GPU links"


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


def pinned_apart(pinned: PinnedApart) -> str:
    """Why bound pods leave a group no domain (`gpusched.engine.domains.pinned_domains`)."""
    if pinned.spans:
        spans = "; ".join(f"{name} ({', '.join(nodes)})" for name, nodes in pinned.spans)
        return (
            f"bound pods already span {len(pinned.spans)} {pinned.key} domains, "
            f"which its constraint forbids: {spans}"
        )
    return f"pinned by bound pods on {', '.join(pinned.outside)}, outside {pinned.parent}"


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
    if wait.short:
        return "minResources: " + "; ".join(
            f"{_amount(shortfall.resource, shortfall.free)} of the "
            f"{_amount(shortfall.resource, shortfall.wanted)} {shortfall.resource} wanted are "
            "free in the cluster"
            for shortfall in wait.short
        )
    if wait.tasks:
        return "; ".join(
            f"task {task}: {count} of {minimum} valid pods exist (minTaskMember)"
            for task, count, minimum in wait.tasks
        )
    if wait.counted is Counted.CHILD_GROUPS:
        verb = "have their pods" if wait.ready else "exist"
        return f"{wait.present} of {wait.minimum} child groups {verb} (minGroupCount)"
    are = "is" if wait.gated == 1 else "are"
    also = f"; {wait.gated} more {are} held back by scheduling gates" if wait.gated else ""
    if wait.minimum is not None:
        return f"{wait.present} of {wait.minimum} valid pods exist (minCount {wait.minimum}){also}"
    return f"no valid pods exist{also}"


def _amount(resource: str, value: int) -> str:
    """A canonical amount as a person writes it: cores for cpu, Gi or Mi for memory-like
    resources (whole ones), a count for the rest."""
    if resource == "cpu":
        return f"{value / 1000:g}"
    if resource == "memory" or resource.startswith(("hugepages-", "ephemeral-storage")):
        for unit, size in (("Gi", 2**30), ("Mi", 2**20)):
            if value >= size and value % size == 0:
                return f"{value // size}{unit}"
    return str(value)


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


# ----- node checks (`gpusched.engine.fit`, `gpusched.engine.blockers`) --------------------------

NOT_READY = "node is NotReady"
CORDONED = "node is cordoned"
AFFINITY_MISMATCH = "required node affinity does not match"


def untolerated_taint(key: str, value: str | None, effect: str) -> str:
    return f"untolerated taint {key}{f'={value}' if value else ''}:{effect}"


def selector_mismatch(key: str, value: str) -> str:
    return f"nodeSelector {key}={value} does not match"


def quantity(resource: str, amount: int) -> str:
    """An amount as Kubernetes writes it: millicores, GiB of memory, else the count."""
    if resource == "cpu":
        return f"{amount}m"
    if resource == "memory" or resource.startswith("hugepages-"):
        return f"{amount / 2**30:.1f}Gi"
    return str(amount)


def short_of(resource: str, free: int, needed: int) -> str:
    """ "4000m free, needs 8000m"."""
    return f"{quantity(resource, free)} free, needs {quantity(resource, needed)}"


def gpus_short(have: int, one_numa_node: bool, needed: int) -> str:
    where = " in one NUMA node" if one_numa_node else ""
    return f"{have} free usable GPUs{where}, needs {needed}"


def share_short(most: int, needed: int) -> str:
    return f"most free on one GPU: {most}, needs {needed}"


def excluded_gpus(notes: Sequence[tuple[int, str]]) -> str:
    """The suffix naming a node's GPUs excluded by telemetry, (GPU index, note) each."""
    listed = ", ".join(f"GPU {gpu} {note}" for gpu, note in notes)
    return f"; excluded: {listed}" if notes else ""


def with_detail(text: str, detail: str) -> str:
    """ "node-a (2 free usable GPUs, needs 4)"; the text alone without a detail."""
    return f"{text} ({detail})" if detail else text


def with_capacity(name: str, copies: int) -> str:
    """A node that fits, with how many copies of the pod it takes: "node-a ×2"."""
    return f"{name} ×{copies}"


def gpu_note(gpu: int, note: str) -> str:
    """A binding's note on one of its GPUs."""
    return f"GPU {gpu}: {note}"


def assumed_gpus(pod: str, wanted: int, chosen: Sequence[int]) -> str:
    """A node's note on a pod bound without saying which GPUs it holds."""
    return (
        f"{pod} holds {wanted} GPU(s) without a valid gpusched.io/gpus "
        f"annotation; assumed GPU(s) {','.join(map(str, chosen))}"
    )


# ----- telemetry verdicts (`gpusched.engine.health`) --------------------------------------------

NO_TELEMETRY = "no telemetry"


def telemetry_stale(age_seconds: float, max_age_seconds: float) -> str:
    return f"telemetry stale ({age_seconds:.0f} s > {max_age_seconds:.0f} s)"


def too_hot(temperature_c: float, limit_c: float) -> str:
    return f"{temperature_c:.0f} °C > {limit_c:.0f} °C"


def xid_error(code: float) -> str:
    return f"XID error {code:.0f}"


def low_memory(ratio: float, minimum: float, free_mib: float | None) -> str:
    return f"free memory {ratio:.0%} < {minimum:.0%} ({free_mib:.0f} MiB free)"


# ----- bad input and the queue (`gpusched.engine.schedule`) -------------------------------------


def gated(gates: Sequence[str]) -> str:
    return f"waiting for scheduling gates to be removed: {', '.join(gates)}"


def group_name(kind: str, key: str) -> str:
    """ "PodGroup default/train"."""
    return f"{kind} {key}"


ParentProblem = Literal["missing", "not composite", "cycle", "invalid"]
_PARENT_PROBLEMS: dict[ParentProblem, str] = {
    "missing": "parent CompositePodGroup {parent} not found",
    "not composite": "parent {parent} is not a CompositePodGroup",
    "cycle": "parentCompositePodGroupName forms a cycle",
    "invalid": "parent {parent} is invalid",
}


def parent_problem(kind: str, key: str, problem: ParentProblem, parent: str) -> str:
    """Why a group's parent makes it invalid."""
    return f"{group_name(kind, key)}: " + _PARENT_PROBLEMS[problem].format(parent=parent)


def larger_than_any_node(amount: int, resource: str, largest: int) -> str:
    return f"requests {amount} {resource}; the largest node has {largest}"


def share_without_gpus(milli: int) -> str:
    return f"requests a {milli} milli-GPU share; no node has GPUs"


def group_not_found(key: str) -> str:
    return f"PodGroup {key} not found"


def pod_in_composite(key: str) -> str:
    return f"{key} is a CompositePodGroup; pods belong to PodGroups"


def placed_in_segments(done: int, of: int, domain: str, segments: Sequence[SegmentPlaced]) -> str:
    """A segmented gang placed: `placed`, then where its segments went."""
    return placed(done, of, Counted.PODS, domain) + " " + segments_placed(segments)


# ----- preemption (`gpusched.engine.preemption`) ------------------------------------------------
# GPU amounts come formatted (`gpusched.engine.preemption.result.gpus_text`).


def no_lower_priority(priority: int, protected: int) -> str:
    why = f"no held pod has a priority below {priority}"
    if protected:
        why += f" but {protected} protected ones (unresolved priority, other schedulers)"
    return why


def no_label_at_all(key: str | None) -> str:
    return f"no node has label {key}"


def victim_bound(top_priority: int, gpus: str) -> str:
    return f"highest victim priority {top_priority}, {gpus} GPUs"


def not_tried_no_cheaper(top_priority: int, gpus: str) -> str:
    return f"not tried: at best {victim_bound(top_priority, gpus)}, no cheaper than the plan found"


NOT_TRIED_BUDGET = "not tried: the preemption budget was spent"


def never_fits(failure: str) -> str:
    return f"even evicting every lower-priority pod there it does not fit: {failure}"


def no_plan(spent: bool, options: Sequence[tuple[str, str]]) -> str:
    """Why no domain gave a plan, then each domain and what became of it."""
    why = "the preemption budget ran out" if spent else "no domain can make room"
    return f"{why}: " + "; ".join(f"{domain}: {detail}" for domain, detail in options)


def fits_without_evicting(domain: str) -> str:
    return f"fits in {domain} without evicting anything"


def others_weighed(count: int) -> str:
    return f"; {counted(count, 'other domain')} weighed"


def preemptor_invalid(why: str) -> str:
    return f"invalid: {why}"


def priority_unresolved(why: str) -> str:
    return f"priority unresolved: {why}"


POLICY_NEVER = "preemptionPolicy is Never"
PREEMPTION_OFF = "preemption.budget is 0"


def frees_too_little(freed: str, needed: str) -> str:
    return f"evicting every lower-priority pod there frees {freed} of the {needed} GPUs needed"


def child_room_short(slots: int, minimum: int, key: str | None) -> str:
    return (
        f"evicting every lower-priority pod there leaves room for {slots} of the "
        f"{minimum} child groups (minGroupCount) in its {key} domains"
    )


def plan_cost(overrun: int, top_priority: int, gpus: str, groups: int) -> str:
    pdb = f"{overrun} PDB violations" if overrun else "no PDB violated"
    victims = counted(groups, "victim group")
    return f"{pdb}, highest victim priority {top_priority}, {gpus} GPUs, {victims}"


def protected_invalid(why: str) -> str:
    return f"its group is invalid: {why}"


def protected_priority(why: str) -> str:
    return f"its priority is unresolved: {why}"


def other_schedulers_pod(pod: str) -> str:
    return f"{pod} was bound by another scheduler (evictOtherSchedulersPods off)"


# ----- what a node or a pod says of itself (`gpusched.engine.build`, `gpusched.engine.request`) --


def node_problem(node: str, problem: str) -> str:
    return f"Node {node}: {problem}"


def gpu_count_mismatch(node: str, field: str, described: int, count: int, resource: str) -> str:
    return node_problem(
        node, f"{field}: describes {described} GPUs but the node advertises {count} {resource}"
    )


def share_of_many(gpus: int, resource: str) -> str:
    return f"a GPU share applies to one GPU, but the pod requests {gpus} {resource}"


# ----- DRA devices and claims ------------------------------------------------------------------


NO_TOPOLOGY = "it has no gpusched.io/gpu-topology annotation"


def device_notes(problems: Sequence[str], shared: Sequence[str] = ()) -> str:
    """Why some of a node's GPUs are not placed by gpusched as whole GPUs: its problems, then
    the devices shared by capacity (``shared``, device names; placed by `engine.shares`)."""
    notes = list(problems)
    if shared:
        notes.append(shared_devices(shared))
    return "; ".join(notes)


def many_pools(driver: str, pools: Sequence[str]) -> str:
    return (
        f"it publishes {driver} devices in {len(pools)} pools ({', '.join(pools)}); "
        "gpusched expects one"
    )


def pool_updating(driver: str, pool: str, published: int, expected: int) -> str:
    return (
        f"its {driver} pool {pool} has {published} of {expected} "
        "ResourceSlices of its newest generation published; waiting for the rest"
    )


def devices_unmatched(driver: str, why: str) -> str:
    return f"its {driver} devices cannot be matched to GPUs by UUID: {why}"


def device_without_gpu(device: str, uuid: object) -> str:
    return (
        f"device {device} (uuid {uuid or 'missing'}) matches no GPU in its "
        "gpusched.io/gpu-topology annotation; it is not allocated"
    )


def shared_uuid(first: str, second: str, uuid: object) -> str:
    return f"devices {first} and {second} share uuid {uuid}"


def gpu_without_device(index: int, uuid: str | None, driver: str) -> str:
    return (
        f"GPU {index} ({uuid or 'no uuid'}) of its gpusched.io/gpu-topology "
        f"annotation is missing from its {driver} ResourceSlices; it is not used"
    )


def cel_equality(domain: str, attribute: str, value: str | int | bool) -> str:
    """A selector check as the CEL it was read from (``attribute`` '' for the driver)."""
    if not attribute:
        return f"device.driver == {value!r}"
    return f"device.attributes[{domain!r}].{attribute} == {value!r}"


def cel_beyond(expression: str, clause: str) -> str:
    return (
        f"CEL selector {expression!r} is beyond what gpusched evaluates (&&-joined "
        "equalities on device.driver and device.attributes[...]): "
        f"{clause!r}"
    )


def device_class_label(name: str) -> str:
    return f"DeviceClass {name}"


def claim_label(key: str) -> str:
    return f"ResourceClaim {key}"


def request_label(where: str, request: str) -> str:
    return f"{where}: request {request}"


def pod_label(key: str) -> str:
    return f"Pod {key}"


def selector_not_cel(where: str) -> str:
    return f"{where} has a selector that is not CEL"


def other_drivers(where: str, drivers: Sequence[str], driver: str) -> str:
    named = ", ".join(drivers) or "no driver"
    return (
        f"{where} selects {named}; gpusched allocates only {driver} GPUs "
        "(other drivers' devices are left to their own claims)"
    )


def constraints_unsupported(where: str) -> str:
    return f"{where}: spec.devices.constraints are not supported by gpusched"


def first_available_unsupported(field: str) -> str:
    return f"{field}: firstAvailable is not supported by gpusched"


def allocation_mode_unsupported(field: str, mode: str) -> str:
    return f"{field}: allocationMode {mode} is not supported"


def admin_access_unsupported(field: str) -> str:
    return f"{field}: adminAccess is not supported by gpusched"


def device_class_missing(field: str, name: str) -> str:
    return f"{field}: DeviceClass {name} does not exist"


def channels_counted(field: str, count: int) -> str:
    return f"{field}: {count} IMEX channels; a pod takes its node's one channel"


def default_channel_only(field: str) -> str:
    return (
        f"{field}: gpusched allocates the default IMEX channel (id 0, DeviceClass "
        "compute-domain-default-channel.nvidia.com) only"
    )


def not_whole_gpus(
    field: str, class_name: str, driver: str, kinds: Sequence[str], whole: str
) -> str:
    return (
        f"{field}: DeviceClass {class_name} selects {driver} devices of type "
        f"{', '.join(repr(k) for k in kinds)}; gpusched allocates whole GPUs (type "
        f"{whole!r}) only, so MIG slices and other partitions are not placed"
    )


def template_claim_pending(entry: str, template: str | None) -> str:
    return (
        f"waiting for the ResourceClaim of {entry} (from ResourceClaimTemplate "
        f"{template}) to be created"
    )


def gpus_besides_claims(resource: str) -> str:
    return (
        f"the pod asks for {resource} besides ResourceClaims; gpusched "
        "places GPUs of one kind per pod: ask for them all through its claims"
    )


def claim_missing(key: str) -> str:
    return f"waiting for ResourceClaim {key} to exist"


def claim_deleting(key: str) -> str:
    return f"ResourceClaim {key} is being deleted"


def claim_releasing(key: str) -> str:
    return f"ResourceClaim {key} is being released"


def claim_reserved_unbound(key: str) -> str:
    return (
        f"ResourceClaim {key} is reserved for this pod by a scheduler that never "
        "bound it; releasing it"
    )


def claim_allocating(key: str) -> str:
    return f"ResourceClaim {key} is being allocated"


def claim_shared_in_gang(key: str, first: str) -> str:
    return (
        f"ResourceClaim {key} is shared with {first} of the same gang and is not "
        "allocated yet; gpusched places pods on a shared claim once it is allocated, "
        "so let one pod outside the gang (or one gang member alone) allocate it first"
    )


def extended_claim_unbound(key: str, resource: str) -> str:
    return (
        f"ResourceClaim {key} was made for this pod's {resource} by an "
        "attempt that never bound it; deleting it"
    )


def extended_count_mismatch(resource: str, count: int, gpus: int) -> str:
    return (
        f"the containers' {resource} requests come to {count} devices "
        f"for a pod that needs {gpus}; gpusched does not guess which to allocate"
    )


def allocation_selector_unreadable(key: str, error: object) -> str:
    return f"ResourceClaim {key}: status.allocation.nodeSelector cannot be read: {error}"


def no_devices_published(driver: str) -> str:
    return f"the node publishes no {driver} devices"


def gpus_not_published(gpus: Sequence[int], node: str) -> str:
    return f"GPUs {list(gpus)} of {node} are not all published as devices"


def no_channel_for(node: str, driver: str, claim: str) -> str:
    return f"{node} publishes no {driver} channel for {claim}"


def unpublished_gpus(driver: str, node: str) -> str:
    """Stands, as the holder's name, for a node's GPUs its DRA driver does not publish."""
    return f"GPUs not published by {driver} on {node}"


def kueue_size_disagrees(
    other: str, annotation: str, other_total: int | None, first: str, first_total: int | None
) -> str:
    return (
        f"Pod {other}: metadata.annotations[{annotation}]: "
        f"{other_total}, but Pod {first} says {first_total}; "
        "the pods of one Kueue group must agree on its size"
    )


# ----- devices shared by capacity (`gpusched.engine.shares`) -----------------------------------


def shared_devices(names: Sequence[str]) -> str:
    """A node's devices several claims share by capacity: never whole GPUs."""
    return (
        f"devices {', '.join(names)} allow multiple allocations (the driver's "
        "ConsumableShares): claims share them by memory capacity, never as whole GPUs"
    )


def share_unsupported(field: str, count: int, capacities: Sequence[str]) -> str:
    """A request naming capacity beyond one device's memory."""
    return (
        f"{field}: capacity requests {', '.join(capacities) or 'nothing'} of {count} devices; "
        "gpusched places a request for memory of one shared device only"
    )


def share_amounts(claim: str, request: str, found: int, too_big: bool) -> str:
    """A share request whose consumption the shared devices do not agree on (or none has;
    ``too_big``: every one refuses it)."""
    if too_big:
        return (
            f"ResourceClaim {claim}: request {request} asks for more memory than any of the "
            f"{found} shared devices has or its request policy allows"
        )
    if not found:
        return (
            f"ResourceClaim {claim}: request {request} asks for capacity, and no node "
            "publishes devices shared by capacity"
        )
    return (
        f"ResourceClaim {claim}: request {request} would consume different amounts of the "
        f"{found} shared devices (their request policies differ, or some refuse it); "
        "gpusched counts one amount per request"
    )


def _bytes(amount: int) -> str:
    return f"{amount // 2**20}Mi" if amount % 2**20 == 0 else f"{amount}"


def device_share_short(device: str, wanted: int, free: int, outside: bool) -> str:
    """No shared device of a node has room for a request (the closest one named)."""
    if not device:
        return "it publishes no devices shared by capacity"
    if outside:
        return f"its shared device {device} does not allow a request of {_bytes(wanted)} memory"
    return (
        f"its shared device {device} has {_bytes(free)} of memory left, the claim "
        f"consumes {_bytes(wanted)}"
    )


SHARE_SHORT = "not enough memory left on its shared devices"
"""The node check of a pod's share of a device (`gpusched.engine.shares.SHARE_RESOURCE`)."""


def share_left(free: int, wanted: int) -> str:
    return (
        f"its shared devices have {_bytes(free)} of memory left in pieces its claims fit, "
        f"the pod's claims consume {_bytes(wanted)}"
    )


def stranded_memory(node: str) -> str:
    """What holds the memory of a node's shared devices no pending claim can use."""
    return f"memory of shared devices on {node} too small for the pending claims"


def capacity_unreadable(field: str, error: object) -> str:
    """A claim's ``capacity.requests.memory`` that is no quantity."""
    return f"{field}: capacity.requests.memory: {error}"


def shared_without_memory(device: str) -> str:
    return f"device {device} allows multiple allocations and publishes no memory capacity"


def valid_values_unsupported(device: str) -> str:
    return f"device {device}: requestPolicy validValues are not supported by gpusched"


def shared_memory_unreadable(device: str, error: object) -> str:
    return f"device {device}: capacity memory cannot be read: {error}"
