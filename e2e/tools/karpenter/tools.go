//go:build tools

// Package tools pins Karpenter's KWOK provider for e2e/tools/build.sh.
package tools

import _ "sigs.k8s.io/karpenter/kwok"
