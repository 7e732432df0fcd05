"""What the tests share: builders for the engine's inputs (`engine`), Kubernetes objects as the
API server holds them (`manifests`), the fakes of the API (`fakes`) and one virtual `clock`."""
