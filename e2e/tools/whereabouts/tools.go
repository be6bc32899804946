//go:build tools

// Package tools pins whereabouts for e2e/tools/build.sh: its CNI IPAM plugin
// and its node-slice controller, which real nodes run with IPAM=whereabouts
// (e2e/plane/realnode_whereabouts.go).
package tools

import (
	_ "github.com/k8snetworkplumbingwg/whereabouts/cmd"
	_ "github.com/k8snetworkplumbingwg/whereabouts/cmd/nodeslicecontroller"
)
