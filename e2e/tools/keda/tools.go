//go:build tools

// Package tools pins KEDA's operator and metrics server for
// e2e/tools/build.sh.
package tools

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
)
