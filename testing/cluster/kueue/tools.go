//go:build tools

// Package tools keeps Kueue's manager, built by build-go.sh, in go.mod.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
