"""What ``gpusched simulate`` prints of a run: the ``-o json`` document and the tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpusched.offline.simulate import Run


def document(run: Run) -> dict[str, Any]:
    """The ``-o json`` document: the engine's; ``preemptions``, what evicting lower-priority
    pods would do for each group left unschedulable; ``invalid`` when a Workload failed
    validation (invalid PodGroups and CompositePodGroups are in ``podGroups``)."""
    found = run.result.to_dict()
    found["preemptions"] = [plan.to_dict() for plan in run.preemptions]
    if run.objects.invalid_workloads:
        found["invalid"] = [
            {"kind": "Workload", "name": key, "reason": "Invalid", "message": message}
            for key, message in sorted(run.objects.invalid_workloads.items())
        ]
    return found


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return lines


def render_table(run: Run) -> str:
    result = run.result
    snapshot = run.snapshot
    gpus = int(snapshot.gpu_offset[-1])
    lines = [
        f"Cluster: {len(snapshot.nodes)} nodes, {gpus} GPUs; "
        f"{len(run.pending)} pending pods, {len(result.bindings)} placed, "
        f"{len(result.unschedulable)} unschedulable",
        "",
    ]
    if result.bindings:
        rows = [
            [
                b.pod,
                b.node,
                ",".join(map(str, b.gpus)) or "-",
                f"{b.link_tier} (best {b.best_tier})" if b.link_tier else "",
            ]
            for b in result.bindings
        ]
        lines += ["BINDINGS", *_table(["POD", "NODE", "GPUS", "GPU LINKS"], rows), ""]
    if result.groups:
        rows = [
            [
                g.name,
                g.kind,
                g.phase.value,
                "/".join(g.placement.values()) or "-",
                g.reason.value,
            ]
            for g in result.groups
        ]
        lines += ["POD GROUPS", *_table(["NAME", "KIND", "PHASE", "PLACEMENT", "REASON"], rows)]
        for group in result.groups:
            if group.phase.value != "Scheduled":
                lines.append(f"  {group.name}: {group.message}")
                lines += [f"    - {attempt}" for attempt in group.attempts]
            elif group.segments:  # where each segment landed
                lines.append(f"  {group.name}: {group.message}")
        lines.append("")
    if result.unschedulable:
        # A pod of a group shown above carries the group's message; say so instead of
        # repeating it for every pod of a large gang.
        shown = {g.message: g.name for g in result.groups if g.phase.value != "Scheduled"}
        rows = [
            [
                u.pod,
                u.reason.value,
                f"see {shown[u.message]} above" if u.message in shown else u.message,
            ]
            for u in result.unschedulable
        ]
        lines += ["UNSCHEDULABLE", *_table(["POD", "REASON", "MESSAGE"], rows), ""]
    if run.preemptions:
        rows = [
            [
                p.preemptor,
                p.outcome.value,
                "/".join(p.placement.values()) or "-",
                str(len(p.victims)),
                p.cost.describe() if p.cost is not None else "-",
            ]
            for p in run.preemptions
        ]
        headers = ["PREEMPTOR", "OUTCOME", "DOMAIN", "VICTIMS", "COST"]
        lines += ["PREEMPTIONS", *_table(headers, rows)]
        lines += [f"  {p.preemptor}: {p.message}" for p in run.preemptions]
        lines.append("")
    if run.objects.invalid_workloads:
        rows = [[key, "Invalid", why] for key, why in sorted(run.objects.invalid_workloads.items())]
        lines += ["INVALID WORKLOADS", *_table(["NAME", "REASON", "MESSAGE"], rows), ""]
    for kind, count in sorted(run.ignored.items()):
        lines.append(f"(ignored {count} × {kind})")
    return "\n".join(lines).rstrip() + "\n"
