// Package ciliumcheck writes CiliumNodes with Cilium's own code
// (github.com/cilium/cilium v1.20.2) for capscale's Cilium presets to be
// checked on: the pods' and the agent's own IPs come out of the IP
// allocator the agent's multi-pool pools use, and each object is written
// with what that allocator can still give pods. capscale's
// TestPresetsOnCiliumWritten (controller/capacitysource) requires the
// preset's count to be exactly that. It is a module of its own so that
// Cilium's dependencies stay out of capscale's; `make test-unit` runs it.
package ciliumcheck
