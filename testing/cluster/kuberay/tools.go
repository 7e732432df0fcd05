//go:build tools

// Package tools keeps the KubeRay operator, built by build-go.sh, in go.mod.
package tools

import (
	_ "github.com/ray-project/kuberay/ray-operator"
)
