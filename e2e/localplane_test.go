//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capscale/capscale/internal/names"
	"github.com/capscale/capscale/internal/underlay"
)

// TestLocalUpDown is `make local-up` then `make local-down`, in the default
// mode (plugin: capscale-scheduler is the plane's scheduler, no extender):
// the env file names the mode, the kubeconfig and every component's URL,
// the cluster answers, and
// deploy/'s caller Roles are installed, and after down no process that up
// started is left.
func TestLocalUpDown(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	// The binaries this run built come first: _output/bin may hold stale
	// capscale binaries of an earlier make build.
	lp := localPlaneUp(ctx, t, "--nodes", "2")
	out, bin, run := lp.dir, lp.bin, lp.run

	var st struct {
		Processes []struct {
			Name string `json:"name"`
			Pid  int    `json:"pid"`
			Exe  string `json:"exe"`
		} `json:"processes"`
	}
	b, err := os.ReadFile(filepath.Join(out, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	started := map[string]int{}
	exe := map[string]string{}
	for _, p := range st.Processes {
		started[p.Name] = p.Pid
		exe[p.Name] = p.Exe
	}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "metrics-adapter", "workload-api", "controller", "load-source"} {
		if started[name] == 0 {
			t.Errorf("local-up did not start %s (state: %s)", name, b)
		}
	}
	if started["extender"] != 0 {
		t.Errorf("plugin mode started an extender (state: %s)", b)
	}
	if filepath.Base(exe["kube-scheduler"]) != "capscale-scheduler" {
		t.Errorf("the plane's scheduler runs %q, want capscale-scheduler", exe["kube-scheduler"])
	}
	env, err := os.ReadFile(filepath.Join(out, "env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"KUBECONFIG=", `MODE="plugin"`, "ADAPTER_URL=", "WORKLOAD_API_URL=", "LOAD_SOURCE_URL=", "CAPSCALE_CA_FILE="} {
		if !strings.Contains(string(env), "export "+v) {
			t.Errorf("env file lacks %s:\n%s", v, env)
		}
	}
	if strings.Contains(string(env), "EXTENDER_URL") {
		t.Errorf("env file names an extender in plugin mode:\n%s", env)
	}
	kubectl := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), "--kubeconfig", filepath.Join(out, "kubeconfig"), "get", "--raw", "/apis/external.metrics.k8s.io/v1beta1")
	if b, err := kubectl.CombinedOutput(); err != nil || !strings.Contains(string(b), "capscale-load-index") {
		t.Errorf("the adapter is not served through the local plane's aggregator: %v\n%s", err, b)
	}

	// The caller Roles deploy/ ships come with the workload API, as
	// `kubectl apply -k deploy/` installs them: make demo binds its console
	// to capscale-workload:elasticweb and writes an ElasticWeb as it.
	k := func(args ...string) ([]byte, error) {
		return exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", filepath.Join(out, "kubeconfig")}, args...)...).CombinedOutput()
	}
	if b, err := k("create", "rolebinding", "console-elasticweb", "-n", "default", "--clusterrole=capscale-workload:elasticweb", "--serviceaccount=default:console"); err != nil {
		t.Fatalf("binding a caller to capscale-workload:elasticweb: %v\n%s", err, b)
	}
	var canI []byte
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if canI, err = k("auth", "can-i", "patch", "elasticwebs.capscale.io", "-n", "default", "--as=system:serviceaccount:default:console"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a caller bound to capscale-workload:elasticweb may not patch ElasticWebs (is the Role installed?): %v\n%s", err, canI)
		}
	}

	lp.down()
	for name, pid := range started {
		// Signal 0 to the process group: ESRCH once every member is gone.
		if err := syscall.Kill(-pid, 0); err == nil {
			t.Errorf("%s (pid %d) still runs after local-down", name, pid)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "state.json")); !os.IsNotExist(err) {
		t.Errorf("state.json left after down: %v", err)
	}
	if again := run("down", "--dir", out); !strings.Contains(again, "no local plane is running") {
		t.Errorf("a second down: %q", again)
	}
}

// TestLocalUpPublishCapacity is `make local-up MODE=extender
// PUBLISH_CAPACITY=1`: the extender runs with the publisher, so every
// node's capacity by the rule is in its status, where Karpenter reads it
// (docs/growing-the-cluster.md). In plugin mode the flag is
// refused before any plane starts: that mode has no publisher.
func TestLocalUpPublishCapacity(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	bin := localPlaneBinDir(ctx, t)
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "localplane"), "up", "--dir", t.TempDir(), "--bin-dir", bin,
		"--mode", "plugin", "--publish-capacity").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--publish-capacity is extender mode's") {
		t.Errorf("local-up --mode plugin --publish-capacity: %v, want it refused\n%s", err, out)
	}

	lp := localPlaneUp(ctx, t, "--nodes", "2", "--mode", "extender", "--publish-capacity")
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(lp.dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) == 0 {
			last = fmt.Sprint("listing nodes: ", err)
			return false, nil
		}
		for _, n := range nodes.Items {
			// The extender's --default-capacity is 10.
			want := underlay.Rule{Default: 10}.Capacity(n.Annotations, n.Labels).IPs
			c, a := n.Status.Capacity[names.UnderlayIPResource], n.Status.Allocatable[names.UnderlayIPResource]
			if want <= 0 || c.Value() != want || a.Value() != want {
				last = fmt.Sprintf("%s: capacity %s, allocatable %s, want %d", n.Name, c.String(), a.String(), want)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("local-up in extender mode with --publish-capacity never published every node's capacity: %s", last)
	}
	env, err := os.ReadFile(filepath.Join(lp.dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(env), `export MODE="extender"`) || !strings.Contains(string(env), "export EXTENDER_URL=") {
		t.Errorf("env file of extender mode:\n%s", env)
	}
}
