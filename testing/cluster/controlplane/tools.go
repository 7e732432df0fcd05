//go:build tools

// Package tools keeps the upstream command packages build.sh compiles in go.mod.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
)
