//go:build tools

// Package tools pins etcd for e2e/tools/build.sh.
package tools

import _ "go.etcd.io/etcd/server/v3"
