"""The scheduling service: cluster state, the one scheduling loop, status and Events.

It knows nothing of Kopf (handlers feed it) nor of kubernetes_asyncio (it talks to the API
server through the `ClusterApi` protocol, implemented in `gpusched.k8s`), so it is tested with
both the real adapters over HTTP and without any API at all.

One module per job:
- `factory`: `build_scheduler` wires the collaborators below into a `service.Scheduler`, the
  one object the handlers call (one method per event).
- `loop`: the cycles; `decider`: snapshot and engine run (and the preemption plans on the
  same snapshot); `binder`: reserve and bind; `preemptor`: nominate, evict, bind into the
  nominated room;
  `unknown`: binds whose outcome is unknown; `backoff`; `workloads`: the groups Workloads
  describe; `reporter`: status and Events (sent by `outbox` and `events`, computed by
  `status`); `leadership`: the gate only the Lease holder passes (the Lease itself: `leader`);
  `resync`: fresh lists that reconcile the cache.
- `state`: nodes, pods and the reservation ledger, nominations included (`records`: what is
  kept of a pod; `groups`: groups, Workloads and PriorityClasses; `budgets`:
  PodDisruptionBudgets as watched; the GPUs assumed for pods that do not say which they hold
  are the engine's `gpusched.engine.pins`).
- `dra`: ResourceClaims, DRA's ledger and gpusched's allocation of them; `assignments`: the
  kubelet's record of the GPUs it gave.
- `clock`, `tasks`, `ports`, `refs`: time, background work, the API protocol, object refs.
- `metrics`, `quality_metrics`: Prometheus series.
"""
