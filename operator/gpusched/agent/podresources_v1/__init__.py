"""The kubelet's PodResources API v1: its .proto (from k8s.io/kubelet) and the Python stubs
generated from it; how to regenerate them is at the top of api.proto."""
