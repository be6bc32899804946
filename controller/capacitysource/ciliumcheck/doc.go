// Package ciliumcheck checks capscale's Cilium capacity-source presets on
// CiliumNodes written by Cilium's own code (github.com/cilium/cilium
// v1.20.2): cilium-operator's ENI allocation runs against Cilium's mock EC2
// API, and the agent's pod IPs come out of the IP allocator its multi-pool
// pools use; the presets' count is compared with what that allocator can
// still hand to pods. It is a module of its own so that Cilium's
// dependencies stay out of capscale's; `make test-unit` runs it.
package ciliumcheck
