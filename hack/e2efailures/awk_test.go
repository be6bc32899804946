// Package e2efailures tests hack/e2e-failures.awk, the summary CI prints of
// each failed e2e test.
package e2efailures

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A failed test's message keeps the lines that go with it (a process's log
// tail, indented deeper), the plane's start-up lines are left out, and a
// passing test prints nothing.
func TestSummaryKeepsAMessagesTail(t *testing.T) {
	log := strings.Join([]string{
		"=== RUN   TestSchedulingBurst",
		"=== RUN   TestSchedulingBurst/extender",
		"    plane.go:192: starting etcd on 127.0.0.1:65524",
		"    scheduling_test.go:133: starting stack: extender exited before ready: exit status 1",
		"        I1130 16:00:00.000000 1 server.go:50] Extender starting",
		"        E1130 16:00:00.100000 1 main.go:20] extender server: listen tcp 127.0.0.1:23456: bind: address already in use",
		"=== RUN   TestOther",
		"    other_test.go:10: fine",
		"unindented output of TestOther",
		"        not part of any message",
		"--- PASS: TestOther (1.00s)",
		"--- FAIL: TestSchedulingBurst (62.91s)",
		"    --- FAIL: TestSchedulingBurst/extender (10.00s)",
		"",
	}, "\n")
	out := summary(t, log)
	want := strings.Join([]string{
		"----- TestSchedulingBurst failed; its last lines -----",
		"----- TestSchedulingBurst/extender failed; its last lines -----",
		"    scheduling_test.go:133: starting stack: extender exited before ready: exit status 1",
		"        I1130 16:00:00.000000 1 server.go:50] Extender starting",
		"        E1130 16:00:00.100000 1 main.go:20] extender server: listen tcp 127.0.0.1:23456: bind: address already in use",
		"",
	}, "\n")
	if out != want {
		t.Errorf("summary:\n%s\nwant:\n%s", out, want)
	}
}

// The components' log tails a failed test's cleanup prints after its
// failure are left out: before they were, their 40 lines took the
// summary's room and a CI log cut in the middle lost the failure itself
// (TestSchedulingFailover/plugin, CI of 2026-12-01).
func TestSummaryLeavesOutTheComponentLogs(t *testing.T) {
	log := strings.Join([]string{
		"=== RUN   TestSchedulingFailover/plugin",
		"    extender_test.go:171: want 118 bound and 32 pending, have 119 and 31: nodes over underlay-IP capacity: kwok-node-3 (4/3)",
		"    main_test.go:97: component logs:",
		"        ===== kube-apiserver =====",
		"        E1201 03:40:39.434740   29596 writers.go:130] \"Unhandled Error\"",
		"    --- FAIL: TestSchedulingFailover/plugin (52.05s)",
		"",
	}, "\n")
	out := summary(t, log)
	want := strings.Join([]string{
		"----- TestSchedulingFailover/plugin failed; its last lines -----",
		"    extender_test.go:171: want 118 bound and 32 pending, have 119 and 31: nodes over underlay-IP capacity: kwok-node-3 (4/3)",
		"",
	}, "\n")
	if out != want {
		t.Errorf("summary:\n%s\nwant:\n%s", out, want)
	}
}

// summary is the awk script's summary of one shard log.
func summary(t *testing.T, log string) string {
	t.Helper()
	in := filepath.Join(t.TempDir(), "shard.log")
	if err := os.WriteFile(in, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("awk", "-f", "../e2e-failures.awk", in).CombinedOutput()
	if err != nil {
		t.Fatalf("awk: %v\n%s", err, out)
	}
	return string(out)
}
