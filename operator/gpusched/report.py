"""Human-readable tables of a simulation's decisions."""

from __future__ import annotations

from collections.abc import Sequence

from gpusched.simulate import Simulation


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return lines


def render_table(simulation: Simulation) -> str:
    result = simulation.result
    snapshot = simulation.snapshot
    gpus = int(snapshot.gpu_offset[-1])
    lines = [
        f"Cluster: {len(snapshot.nodes)} nodes, {gpus} GPUs; "
        f"{simulation.pending} pending pods, {len(result.bindings)} placed, "
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
    if simulation.invalid_workloads:
        rows = [[key, "Invalid", why] for key, why in sorted(simulation.invalid_workloads.items())]
        lines += ["INVALID WORKLOADS", *_table(["NAME", "REASON", "MESSAGE"], rows), ""]
    for kind, count in sorted(simulation.ignored.items()):
        lines.append(f"(ignored {count} × {kind})")
    return "\n".join(lines).rstrip() + "\n"
