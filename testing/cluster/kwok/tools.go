//go:build tools

// Package tools keeps kwok's controller, built by build-go.sh, in go.mod.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
