package main

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/capscale/capscale/e2e/loadsource"
	"github.com/capscale/capscale/e2e/plane"
	"github.com/capscale/capscale/e2e/stack"
)

// kedaConfig is one source, polled every second so that the source adds
// little to the reaction time either side measures.
const kedaConfig = `sources:
- name: load
  url: %s
  jsonPath: '{.data.load_balance}'
  interval: 1s
  timeout: 1s
  maxAge: 30s
  tls: {caFile: %s}
`

const (
	kedaNS = "bench-keda"
	// Every HPA aims at 1 per replica of the one load index: 0.5 wants one
	// replica, 1.5 two, both far outside the HPA's 10% tolerance.
	loadLow, loadHigh = 0.5, 1.5
	scalerAuthName    = "capscale-keda-scaler"
)

var (
	scaledObjectsGVR = schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"}
	triggerAuthGVR   = schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "triggerauthentications"}
)

// kedaRig is the one plane both sides run on.
type kedaRig struct {
	o          kedaOptions
	s          *stack.Stack
	src        *loadsource.Source
	srv        *httptest.Server
	dir        string
	scalerAddr string
	cs         kubernetes.Interface // a higher client QPS, for N objects at once
	dyn        dynamic.Interface
	watch      *hpaWatch
	adminHTTP  *http.Client
	kcmURL     string // kube-controller-manager's /metrics; "" if unknown
	k          *stack.KEDA
}

// startKEDARig starts the source (on 127.0.0.1, verified TLS), the plane,
// capscale's adapter with its KEDA scaler on 127.0.0.1 and the APIService,
// and N Deployments of one replica.
func startKEDARig(ctx context.Context, o kedaOptions) (r *kedaRig, err error) {
	r = &kedaRig{o: o, src: &loadsource.Source{}}
	defer func() {
		if err != nil {
			r.stop()
		}
	}()
	r.src.Set(loadLow)
	r.srv = httptest.NewTLSServer(r.src)
	if r.dir, err = os.MkdirTemp("", "capscale-bench-keda-"); err != nil {
		return r, err
	}
	caFile := filepath.Join(r.dir, "source-ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw}), 0o644); err != nil {
		return r, err
	}
	cfg := filepath.Join(r.dir, "adapter.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(kedaConfig, r.srv.URL+"/load", caFile)), 0o644); err != nil {
		return r, err
	}
	port, err := plane.FreePort()
	if err != nil {
		return r, err
	}
	r.scalerAddr = fmt.Sprintf("127.0.0.1:%d", port)
	nodes := nodesFor(o.ScaledObjects)
	// The scaler is on for both sides: one adapter process, the same code
	// loaded, whichever path the HPAs take.
	r.s, err = stack.Start(ctx, stack.Options{
		BinDir: o.BinDir,
		Plane: plane.Options{BinDir: o.BinDir, Nodes: nodes, HPASyncPeriod: hpaSync,
			Logf: func(f string, a ...any) { fmt.Printf("# "+f+"\n", a...) }},
		Adapter: true, AdapterConfig: cfg,
		Prepare: func(_ context.Context, s *stack.Stack) error {
			s.Opts.AdapterArgs = append(s.Opts.AdapterArgs, "--keda-scaler-bind-address="+r.scalerAddr,
				"--keda-scaler-client-ca-file="+s.PKI.FrontProxy.CertFile)
			return nil
		},
	})
	if err != nil {
		return r, err
	}
	cfgQPS := rest.CopyConfig(r.s.Config)
	cfgQPS.QPS, cfgQPS.Burst = 200, 400
	if r.cs, err = kubernetes.NewForConfig(cfgQPS); err != nil {
		return r, err
	}
	if r.dyn, err = dynamic.NewForConfig(cfgQPS); err != nil {
		return r, err
	}
	if r.adminHTTP, err = adminClient(r.s, 2); err != nil {
		return r, err
	}
	r.kcmURL = controllerManagerMetrics(r.s.Plane)
	if err := r.s.WaitForNamespace(ctx, kedaNS); err != nil {
		return r, err
	}
	if r.watch, err = newHPAWatch(ctx, r.s.Client, kedaNS); err != nil {
		return r, err
	}
	fmt.Printf("# %d kwok nodes; creating %d Deployments\n", nodes, o.ScaledObjects)
	if err := forEach(ctx, o.ScaledObjects, 16, nil, func(ctx context.Context, i int) error {
		_, err := r.cs.AppsV1().Deployments(kedaNS).Create(ctx, benchDeployment(i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return r, fmt.Errorf("creating Deployments: %w", err)
	}
	return r, r.waitDeploymentsReady(ctx)
}

func (r *kedaRig) stop() {
	if r.s != nil {
		r.s.Stop()
	}
	if r.srv != nil {
		r.srv.Close()
	}
	if r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
}

// controllerManagerMetrics is kube-controller-manager's /metrics URL, read
// from the port the plane gave it; "" if it cannot be found.
func controllerManagerMetrics(p *plane.Plane) string {
	for _, proc := range p.Processes() {
		if proc.Name != "kube-controller-manager" {
			continue
		}
		if port, ok := flagValue(proc.Args, "--secure-port"); ok {
			return "https://127.0.0.1:" + port + "/metrics"
		}
	}
	return ""
}

// waitDeploymentsReady waits until every Deployment runs exactly one pod,
// Ready, so the plane has finished with them before anything is measured.
func (r *kedaRig) waitDeploymentsReady(ctx context.Context) error {
	return poll(ctx, "Deployments ready", 10*time.Minute, func() (bool, string) {
		list, err := r.s.Client.AppsV1().Deployments(kedaNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, d := range list.Items {
			if d.Status.Replicas == 1 && d.Status.ReadyReplicas == 1 {
				ready++
			}
		}
		return ready >= r.o.ScaledObjects, fmt.Sprintf("%d of %d", ready, r.o.ScaledObjects)
	})
}
