package plane

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KwokAnnotation marks the nodes kwok manages.
const KwokAnnotation = "kwok.x-k8s.io/node"

// NodeName is the name of the i-th kwok node.
func NodeName(i int) string { return fmt.Sprintf("kwok-node-%03d", i) }

func (p *Plane) node(i int) (*corev1.Node, error) {
	rl := corev1.ResourceList{}
	for name, v := range map[corev1.ResourceName]string{
		corev1.ResourceCPU: p.Opts.NodeShape.CPU, corev1.ResourceMemory: p.Opts.NodeShape.Memory, corev1.ResourcePods: p.Opts.NodeShape.Pods,
	} {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("node shape %s=%q: %w", name, v, err)
		}
		rl[name] = q
	}
	name := NodeName(i)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{KwokAnnotation: "fake"},
			Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
		},
		Status: corev1.NodeStatus{Capacity: rl, Allocatable: rl.DeepCopy()},
	}
	if p.Opts.Node != nil {
		p.Opts.Node(i, n)
	}
	return n, nil
}

// createNodes creates the kwok nodes a few at a time and waits until all are
// Ready (kwok's node-initialize stage sets the conditions) and free of
// kube-controller-manager's not-ready taint: a test that creates a pod the
// moment the nodes are Ready would otherwise see the scheduler filter out a
// node still tainted (TestMostFreeByCount/plugin failed once in 11 so).
func (p *Plane) createNodes(ctx context.Context) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 16)
	)
	for i := 0; i < p.Opts.Nodes; i++ {
		n, err := p.node(i)
		if err != nil {
			return err
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := p.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("creating node %s: %w", n.Name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := joinErrs(errs); err != nil {
		return err
	}
	var kwok *Process
	for _, proc := range p.Processes() {
		if proc.Name == "kwok" {
			kwok = proc
		}
	}
	ready, tainted, mostTainted := 0, 0, 0
	err := p.waitUntil(ctx, kwok, nodeTimeout(p.Opts.Nodes), fmt.Sprintf("%d Ready, untainted nodes", p.Opts.Nodes), func(ctx context.Context) (bool, error) {
		nodes, err := p.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready, tainted = 0, 0
		for i := range nodes.Items {
			switch {
			case !NodeReady(&nodes.Items[i]):
			case NotReadyTainted(&nodes.Items[i]):
				tainted++
			default:
				ready++
			}
		}
		mostTainted = max(mostTainted, tainted)
		return ready >= p.Opts.Nodes, nil
	})
	if err != nil {
		// Say which wait it was: nodes not Ready (kwok) or still tainted (kcm).
		return fmt.Errorf("%w (at the end: %d Ready and untainted, %d Ready but tainted not-ready)", err, ready, tainted)
	}
	if mostTainted > 0 {
		p.Opts.Logf("waited for kube-controller-manager to lift its not-ready taint from up to %d Ready nodes", mostTainted)
	}
	return nil
}

// NotReadyTainted reports whether the node carries the NoSchedule taint
// kube-controller-manager puts on a node it saw not ready. It lifts the
// taint only on its next pass (--node-monitor-period), so a node Ready in
// status may still turn pods away: the scheduler filters it out.
func NotReadyTainted(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if (t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable) && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeTimeout: kwok makes nodes Ready quickly, but kube-controller-manager
// lifts their not-ready taint at its default 20 QPS among its other writes:
// 500 nodes took 119 s to come up untainted (110 s was too short).
func nodeTimeout(n int) time.Duration { return 60*time.Second + time.Duration(n)*300*time.Millisecond }
