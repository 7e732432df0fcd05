"""What the tests and the benchmarks share (no tests here, and nothing from ``tests/``):
builders for the engine's inputs (`engine`) and for Kubernetes objects as the API server holds
them (`manifests`), the fakes of the API (`fakes`), the one virtual `clock`, the API emulator
(`apiserver`), the real control plane (`cluster`), the running operator (`harness`),
kube-scheduler beside it (`upstream`) and the helm binary (`helm`)."""
