//go:build tools

// Package tools pins helm for e2e/tools/build.sh.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
