//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/capscale/capscale/e2e/plane"
)

// imageUID is the uid of capscale's image config (hack/oci's User).
const imageUID = 65532

// TestRealNodeImage shows that capscale's own image exists and runs: built
// for linux/amd64 by `make image` (hack/oci, no container engine), pushed to
// go-containerregistry's registry (`hack/oci registry`, a process of the
// test on 127.0.0.1), pulled from there by a real node's containerd (a
// hosts.toml for the registry in the node's own registry config_path: plain
// HTTP), and run by the kubelet as a pod that prints the version the image
// was built with and exits. The pod Succeeds; the kubelet's events say it
// pulled the image (not found it present: the node had no such image
// before); the container ran as the image's uid, 65532, under
// runAsNonRoot; its log is the version; the digest in the pod's status is
// the one pushed, which the registry serves for the tag. The Helm chart,
// pushed beside it by `make release-chart`, names that image. Then the node's
// hosts.toml, rewritten to say HTTPS, makes the next pull fail: containerd
// pulled the way the file told it.
func TestRealNodeImage(t *testing.T) {
	ctx := testContext(t, 15*time.Minute)
	work := t.TempDir()
	reg := startRegistry(ctx, t, work)

	// A tag of this run only: the log must show this version, and no
	// earlier run's image can stand in for it.
	version := fmt.Sprintf("v0.0.0-e2e.%d", time.Now().Unix())
	start := time.Now()
	pushed := makeImage(ctx, t, work, reg, version)
	t.Logf("make image (linux/amd64) and push to %s: %.1fs, index %s", reg, time.Since(start).Seconds(), pushed)
	if served := registryDigest(ctx, t, reg, "capscale", version); served != pushed {
		t.Fatalf("the registry serves %s for capscale:%s, make image pushed %s", served, version, pushed)
	}
	start = time.Now()
	chartImage := pushChart(ctx, t, work, reg, version)
	t.Logf("make release-chart to %s: %.1fs; the chart's image: %s", reg, time.Since(start).Seconds(), chartImage)
	ref := reg + "/capscale:" + version
	if chartImage != ref {
		t.Errorf("the chart pushed names the image %s, want %s", chartImage, ref)
	}

	p := startPlane(t, plane.Options{Nodes: 1, RealNodes: 1, RealNodeRegistries: []string{reg}})
	t.Cleanup(func() {
		if err := p.StopRealNodes(); err != nil {
			t.Errorf("real nodes' cleanup: %v", err)
		}
	})
	node := p.RealNodes[0]
	if out, err := node.Ctr(ctx, "images", "ls", "-q"); err != nil || strings.Contains(out, reg+"/capscale") {
		t.Fatalf("before the pod, %s's containerd must not have the image (err %v):\n%s", node.Name, err, out)
	}

	const ns = "image"
	if err := p.WaitForNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "capscale-version"},
		Spec: corev1.PodSpec{
			NodeSelector:                 map[string]string{plane.RealNodeLabel: "true"},
			AutomountServiceAccountToken: ptr.To(false),
			RestartPolicy:                corev1.RestartPolicyNever,
			// No runAsUser: the kubelet takes the image's user and refuses
			// to start the container if that user is root.
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
			Containers: []corev1.Container{{
				Name: "capscale", Image: ref, ImagePullPolicy: corev1.PullAlways,
				Command: []string{"/kubectl-capscale", "--version"},
			}},
		},
	}
	created := time.Now()
	if _, err := p.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	done := waitPodSucceeded(ctx, t, p, ns, pod.Name, 3*time.Minute)
	t.Logf("pod %s: created to Succeeded on %s in %.1fs (pull included)", pod.Name, node.Name, time.Since(created).Seconds())

	pulled := waitPulledEvent(ctx, t, p, ns, pod.Name, ref)
	t.Logf("the kubelet: %s", pulled)

	cs := done.Status.ContainerStatuses[0]
	if want := reg + "/capscale@" + pushed; cs.ImageID != want {
		t.Errorf("the pod's imageID is %q, want %q (the digest pushed)", cs.ImageID, want)
	}
	// The kubelet passes the image's uid alone (getImageUser), and
	// containerd looks the group up in the image's /etc/passwd, which it
	// has none of: without runAsGroup the group is 0, whatever the image
	// config says. The chart sets runAsGroup; only the uid is the image's.
	uid, gid := containerUser(ctx, t, node, cs.ContainerID)
	if uid != imageUID {
		t.Errorf("the container ran as uid %d, want the image's %d", uid, imageUID)
	}
	t.Logf("the container ran as %d:%d (runAsNonRoot, no runAsUser or runAsGroup)", uid, gid)
	if got, want := containerLog(t, node, done), "kubectl capscale version "+version; got != want {
		t.Errorf("the container's log is %q, want %q", got, want)
	}
	if out, err := node.Ctr(ctx, "images", "ls", "-q"); err != nil || !strings.Contains(out, ref) {
		t.Errorf("after the pod, %s's containerd should list %s (err %v):\n%s", node.Name, ref, err, out)
	}
	checkHostsFileFollowed(ctx, t, p, node, reg, pod)
}

// checkHostsFileFollowed shows that the node's hosts.toml for reg is what
// its containerd follows: told HTTPS instead, it fails the next pull of
// pod's image. (containerd 1.6 also tries plain HTTP for a loopback
// registry with no hosts.toml at all, so a pull that works does not show
// that the file is read.)
func checkHostsFileFollowed(ctx context.Context, t *testing.T, p *plane.Plane, node *plane.RealNode, reg string, pod *corev1.Pod) {
	t.Helper()
	hostsFile := node.RegistryHostsFile(reg)
	httpsHosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "https://"+reg, "https://"+reg)
	if err := os.WriteFile(hostsFile, []byte(httpsHosts), 0o644); err != nil {
		t.Fatal(err)
	}
	again := pod.DeepCopy()
	again.Name = "capscale-version-https"
	if _, err := p.Client.CoreV1().Pods(again.Namespace).Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", again.Name, err)
	}
	const wrongScheme = "server gave HTTP response to HTTPS client"
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := p.Client.CoreV1().Pods(again.Namespace).Get(ctx, again.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if got.Status.Phase != corev1.PodPending {
			return false, fmt.Errorf("pod %s is %s: the pull did not follow the hosts.toml", again.Name, got.Status.Phase)
		}
		_, msg := podWaiting(got)
		return strings.Contains(msg, wrongScheme), nil
	})
	if err != nil {
		t.Errorf("with an HTTPS hosts.toml, pod %s should fail to pull with %q: %v; its events:%s", again.Name, wrongScheme, err, podEvents(ctx, p, again.Namespace, again.Name))
	}
}

// waitPodSucceeded waits until the pod has Succeeded, and fails the test
// at once, with the kubelet's words, if it cannot pull its image or fails.
func waitPodSucceeded(ctx context.Context, t *testing.T, p *plane.Plane, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if pod, err = p.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		switch r, msg := podWaiting(pod); {
		case pod.Status.Phase == corev1.PodSucceeded:
			return true, nil
		case pod.Status.Phase == corev1.PodFailed:
			return false, fmt.Errorf("pod failed; its events:%s", podEvents(ctx, p, ns, name))
		case r == "ErrImagePull" || r == "ImagePullBackOff" || r == "CreateContainerConfigError":
			return false, fmt.Errorf("%s: %s", r, msg)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting %s for pod %s/%s to succeed: %v", timeout, ns, name, err)
	}
	return pod
}

// podWaiting is the reason and message of the pod's first waiting
// container: the kubelet's own words for a failed pull.
func podWaiting(p *corev1.Pod) (reason, message string) {
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			return w.Reason, w.Message
		}
	}
	return "", ""
}

// podEvents is the pod's events, one "reason: message" per line.
func podEvents(ctx context.Context, p *plane.Plane, ns, name string) string {
	evs, err := p.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range evs.Items {
		fmt.Fprintf(&b, "\n  %s: %s", e.Reason, e.Message)
	}
	return b.String()
}

// waitPulledEvent waits for the kubelet's event that it pulled ref (not
// that it found it present, which is also reason Pulled) and returns its
// message.
func waitPulledEvent(ctx context.Context, t *testing.T, p *plane.Plane, ns, name, ref string) string {
	t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := p.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=Pulled"})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if strings.HasPrefix(e.Message, fmt.Sprintf("Successfully pulled image %q", ref)) {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no event says the kubelet pulled %s: %v; the pod's events:%s", ref, err, podEvents(ctx, p, ns, name))
	}
	return msg
}

// containerUser is the uid and gid the container ran as: its OCI runtime
// spec, as containerd gave it to runc.
func containerUser(ctx context.Context, t *testing.T, n *plane.RealNode, containerID string) (uid, gid int64) {
	t.Helper()
	id := strings.TrimPrefix(containerID, "containerd://")
	out, err := n.Ctr(ctx, "containers", "info", "--spec", id)
	if err != nil {
		t.Fatalf("reading container %s's spec: %v", id, err)
	}
	var spec struct {
		Process struct {
			User struct {
				UID int64 `json:"uid"`
				GID int64 `json:"gid"`
			} `json:"user"`
		} `json:"process"`
	}
	if err := json.Unmarshal([]byte(out), &spec); err != nil {
		t.Fatalf("container %s's spec: %v\n%s", id, err, out)
	}
	return spec.Process.User.UID, spec.Process.User.GID
}

// containerLog is what the pod's first container wrote, from the kubelet's
// log file on the node (kubectl logs cannot reach a real node's kubelet):
// CRI log lines, "TIME STREAM TAG TEXT", texts joined by newlines.
func containerLog(t *testing.T, n *plane.RealNode, pod *corev1.Pod) string {
	t.Helper()
	c := pod.Spec.Containers[0].Name
	path := filepath.Join(n.PodLogsDir(), fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), c, "0.log")
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the container's log: %v", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if parts := strings.SplitN(sc.Text(), " ", 4); len(parts) == 4 {
			lines = append(lines, parts[3])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return strings.Join(lines, "\n")
}
