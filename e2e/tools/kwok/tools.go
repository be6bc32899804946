//go:build tools

// Package tools pins kwok for e2e/tools/build.sh.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
