"""DRA: ResourceClaims as the ledger of DRA GPUs, and gpusched's allocation of them.

On a node whose GPUs are published as ResourceSlices the GPUs a pod gets are the devices
written into its ResourceClaims' ``status.allocation``: the kubelet and the DRA driver prepare
exactly those. So gpusched writes its own choice there, as kube-scheduler's dynamicresources
plugin would, and reads holdings back from the claims, never from its memory.

What decides is the engine's: `gpusched.engine.dra` turns the watched objects into its
inputs (the device inventory, each pod's claims as `PodRequest.devices`, what claims hold),
the engine filters nodes by them, reports DRA reasons as data, and says which devices each
claim gets (`Binding.devices`). Here is only the ledger and the writes, one module per job:
- `book`: the watched ResourceSlices, DeviceClasses and ResourceClaims (`ClaimBook`).
- `view`: hands the book to the engine's builder each cycle (`DraView`), and keeps what
  the decision is carried out with (`View`).
- `allocator`: the transaction (`ClaimAllocator`). For every pod of a gang, in kube-scheduler's
  order: the claim created (extended resources only), the finalizer
  ``resource.kubernetes.io/delete-protection`` (an update of the claim), then
  ``status.allocation`` with the pod in ``status.reservedFor`` (one status update, as
  kube-scheduler writes them), then the pod's extendedResourceClaimStatus (extended
  resources only); and only when every claim of the gang is written are the pods bound. A
  shared claim allocated already is only joined (the pod added to reservedFor, on the
  allocation's node). Every write is fenced as binds are: none once this replica's term or
  renew deadline has passed.
- `release`: any failure releases every claim the transaction touched (our reservedFor entry
  removed, the allocation we made cleared, our finalizer dropped; a claim we created is
  deleted) and binds nothing (`ClaimReleaser`). What a fenced transaction left written is
  given back by the next leader, which reads holdings from the claims.
"""
