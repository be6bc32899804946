package extender

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// realisticNode is a full Node as a kube-scheduler without a managedFields
// transform sends it: labels, annotations, conditions, the kubelet's 50
// images and the managedFields of kubelet, kube-controller-manager and the
// cloud provider, about 17.6 KiB of JSON (5000 nodes: ~86 MiB).
func realisticNode(i int) v1.Node {
	name := fmt.Sprintf("node-%05d.zone-a.example.internal", i)
	n := v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, UID: types.UID(fmt.Sprintf("0d3c6a52-5f0e-4d5e-9b1f-6f0c5a0e%04d", i%10000)), ResourceVersion: "123456789",
			CreationTimestamp: metav1.Now(),
			Labels: map[string]string{
				"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"topology.kubernetes.io/region": "region-1", "topology.kubernetes.io/zone": "zone-a",
				"node.kubernetes.io/instance-type": "m6i.4xlarge", "node-role.kubernetes.io/worker": "",
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "pool": "general",
			},
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"csi.volume.kubernetes.io/nodeid":                        `{"ebs.csi.aws.com":"i-0123456789abcdef0"}`,
			},
		},
		Spec: v1.NodeSpec{PodCIDR: "10.0.0.0/24", PodCIDRs: []string{"10.0.0.0/24"}, ProviderID: "aws:///zone-a/i-0123456789abcdef0"},
		Status: v1.NodeStatus{
			Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("16"), v1.ResourceMemory: resource.MustParse("64Gi"),
				v1.ResourcePods: resource.MustParse("110"), v1.ResourceEphemeralStorage: resource.MustParse("100Gi")},
			Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("15890m"), v1.ResourceMemory: resource.MustParse("62Gi"),
				v1.ResourcePods: resource.MustParse("110"), v1.ResourceEphemeralStorage: resource.MustParse("95Gi")},
			Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.1.2.3"}, {Type: v1.NodeHostName, Address: name}},
			NodeInfo: v1.NodeSystemInfo{MachineID: "ec2a1b2c3d4e5f60718293a4b5c6d7e8", SystemUUID: "ec2a1b2c-3d4e-5f60-7182-93a4b5c6d7e8",
				BootID: "6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8", KernelVersion: "6.1.0-13-cloud-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)",
				ContainerRuntimeVersion: "containerd://2.1.4", KubeletVersion: "v1.37.1", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
	for _, c := range []v1.NodeConditionType{v1.NodeReady, v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure, v1.NodeNetworkUnavailable} {
		n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: c, Status: v1.ConditionFalse,
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "KubeletHasSufficientResources",
			Message: "kubelet has sufficient resources available"})
	}
	for j := range 6 {
		vol := v1.UniqueVolumeName(fmt.Sprintf("kubernetes.io/csi/ebs.csi.aws.com^vol-0%016x", i*16+j))
		n.Status.VolumesAttached = append(n.Status.VolumesAttached, v1.AttachedVolume{Name: vol})
		n.Status.VolumesInUse = append(n.Status.VolumesInUse, vol)
	}
	n.ManagedFields = realisticManagedFields(&n)
	for j := range 50 {
		img := fmt.Sprintf("registry.example.com/team-%02d/service-%02d", j%7, j)
		n.Status.Images = append(n.Status.Images, v1.ContainerImage{
			Names: []string{
				img + "@sha256:" + fmt.Sprintf("%064x", j*7919+i),
				img + fmt.Sprintf(":v1.%d.%d", j, i%10),
			},
			SizeBytes: int64(50_000_000 + j*1_000_003),
		})
	}
	return n
}

// fieldSet is the fieldsV1 form of a set of paths: every key maps to the
// set below it.
type fieldSet map[string]fieldSet

func (f fieldSet) add(path ...string) {
	for _, p := range path {
		if f[p] == nil {
			f[p] = fieldSet{}
		}
		f = f[p]
	}
}

func (f fieldSet) raw() *metav1.FieldsV1 {
	b, err := json.Marshal(f)
	if err != nil {
		panic(err)
	}
	return metav1.NewFieldsV1(string(b))
}

// realisticManagedFields are the managedFields entries the API server keeps
// for a kubelet-registered cloud node.
func realisticManagedFields(n *v1.Node) []metav1.ManagedFieldsEntry {
	kubelet, status, kcm, ccm := fieldSet{}, fieldSet{}, fieldSet{}, fieldSet{}
	for k := range n.Annotations {
		kubelet.add("f:metadata", "f:annotations", "f:"+k)
	}
	for k := range n.Labels {
		kubelet.add("f:metadata", "f:labels", "f:"+k)
	}
	kubelet.add("f:spec", "f:providerID")
	kcm.add("f:metadata", "f:annotations", "f:node.alpha.kubernetes.io/ttl")
	kcm.add("f:spec", "f:podCIDR")
	kcm.add("f:spec", "f:podCIDRs", "v:\"10.0.0.0/24\"")
	ccm.add("f:metadata", "f:labels", "f:topology.kubernetes.io/region")
	ccm.add("f:metadata", "f:labels", "f:topology.kubernetes.io/zone")
	ccm.add("f:metadata", "f:labels", "f:node.kubernetes.io/instance-type")
	for _, c := range n.Status.Conditions {
		key := fmt.Sprintf("k:{\"type\":\"%s\"}", c.Type)
		for _, f := range []string{"f:lastHeartbeatTime", "f:lastTransitionTime", "f:message", "f:reason", "f:status", "f:type", "."} {
			status.add("f:status", "f:conditions", key, f)
		}
	}
	for _, list := range []string{"f:allocatable", "f:capacity"} {
		for r := range n.Status.Capacity {
			status.add("f:status", list, "f:"+string(r))
		}
	}
	for _, a := range n.Status.Addresses {
		key := fmt.Sprintf("k:{\"type\":\"%s\"}", a.Type)
		status.add("f:status", "f:addresses", key, "f:address")
		status.add("f:status", "f:addresses", key, "f:type")
		status.add("f:status", "f:addresses", key, ".")
	}
	status.add("f:status", "f:daemonEndpoints", "f:kubeletEndpoint", "f:Port")
	status.add("f:status", "f:images")
	for _, f := range []string{"architecture", "bootID", "containerRuntimeVersion", "kernelVersion", "kubeProxyVersion",
		"kubeletVersion", "machineID", "operatingSystem", "osImage", "systemUUID"} {
		status.add("f:status", "f:nodeInfo", "f:"+f)
	}
	status.add("f:status", "f:runtimeHandlers")
	status.add("f:status", "f:volumesInUse")
	kcm.add("f:status", "f:volumesAttached")
	status.add("f:status", "f:features", "f:supplementalGroupsPolicy")
	t := metav1.Now()
	entry := func(manager string, op metav1.ManagedFieldsOperationType, sub string, f fieldSet) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "v1", Time: &t,
			FieldsType: "FieldsV1", FieldsV1: f.raw(), Subresource: sub}
	}
	return []metav1.ManagedFieldsEntry{
		entry("kubelet", metav1.ManagedFieldsOperationUpdate, "", kubelet),
		entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "", kcm),
		entry("cloud-controller-manager", metav1.ManagedFieldsOperationUpdate, "", ccm),
		entry("kubelet", metav1.ManagedFieldsOperationUpdate, "status", status),
		// The kubelet's heartbeats and the controller's status writes
		// alternate, so the status is usually owned twice over.
		entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "status", status),
	}
}

// benchServer returns a handler over a ledger of n nodes, a third of them
// full, and the filter arguments for a pod needing one IP in both modes.
func benchServer(b *testing.B, n int) (http.Handler, *extenderv1.ExtenderArgs, *extenderv1.ExtenderArgs) {
	b.Helper()
	l := NewLedger(LedgerOptions{DefaultCapacity: 10})
	names := make([]string, n)
	list := &v1.NodeList{Items: make([]v1.Node, n)}
	for i := range n {
		list.Items[i] = realisticNode(i)
		names[i] = list.Items[i].Name
		l.SetNode(&list.Items[i])
		for j := range (i % 3) * 5 {
			l.SetPod(pod(fmt.Sprintf("p-%d-%d", i, j), names[i], 1))
		}
	}
	// The ledger as Run leaves it after its first tick: compacted.
	l.Expire()
	reg := prometheus.NewRegistry()
	h := NewHandler(HandlerOptions{Ledger: l, Registerer: reg, Gatherer: reg})
	p := pod("new", "", 1)
	return h, &extenderv1.ExtenderArgs{Pod: p, NodeNames: &names}, &extenderv1.ExtenderArgs{Pod: p, Nodes: list}
}

func benchVerb(b *testing.B, path string) {
	for _, n := range []int{500, 5000} {
		h, namesArgs, nodesArgs := benchServer(b, n)
		for _, mode := range []struct {
			name string
			args *extenderv1.ExtenderArgs
		}{{"NodeNames", namesArgs}, {"Nodes", nodesArgs}} {
			body := mustJSON(b, mode.args)
			b.Run(fmt.Sprintf("%s-%d", mode.name, n), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				// One response buffer for all iterations: a server streams
				// the response to the connection, it does not accumulate it.
				out := &bytes.Buffer{}
				for b.Loop() {
					out.Reset()
					rec := httptest.NewRecorder()
					rec.Body = out
					h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
					if rec.Code != http.StatusOK {
						b.Fatalf("%s: %d %s", path, rec.Code, rec.Body.String())
					}
				}
				b.ReportMetric(float64(len(body))/float64(n), "reqB/node")
			})
		}
	}
}

func BenchmarkFilter(b *testing.B)     { benchVerb(b, "/filter") }
func BenchmarkPrioritize(b *testing.B) { benchVerb(b, "/prioritize") }

// nodesBody is the /filter body of n realistic full Nodes.
func nodesBody(b *testing.B, n int) []byte {
	b.Helper()
	list := &v1.NodeList{Items: make([]v1.Node, n)}
	for i := range n {
		list.Items[i] = realisticNode(i)
	}
	return mustJSON(b, &extenderv1.ExtenderArgs{Pod: pod("new", "", 1), Nodes: list})
}

// BenchmarkDecodeNodesStdlib is the baseline of issue 7: the filter body of
// 5000 realistic full Nodes decoded into extenderv1.ExtenderArgs with
// encoding/json, as an extender using the upstream types would.
func BenchmarkDecodeNodesStdlib(b *testing.B) {
	body := nodesBody(b, 5000)
	b.Run("5000", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var args extenderv1.ExtenderArgs
			if err := json.Unmarshal(body, &args); err != nil || len(args.Nodes.Items) != 5000 {
				b.Fatalf("decoding: %v", err)
			}
		}
	})
}

// BenchmarkDecodeNodesFast decodes the same body with DecodeExtenderArgs.
func BenchmarkDecodeNodesFast(b *testing.B) {
	body := nodesBody(b, 5000)
	b.Run("5000", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			args, err := DecodeExtenderArgs(body)
			if err != nil || len(args.Nodes.Items) != 5000 {
				b.Fatalf("decoding: %v", err)
			}
		}
	})
}

// BenchmarkLedgerUsages is the ledger's share of a names-only call: one
// usage lookup per candidate under one read lock.
func BenchmarkLedgerUsages(b *testing.B) {
	_, namesArgs, _ := benchServer(b, 5000)
	l := NewLedger(LedgerOptions{DefaultCapacity: 10})
	for i := range 5000 {
		n := realisticNode(i)
		l.SetNode(&n)
	}
	l.Expire()
	names := *namesArgs.NodeNames
	// Names as the decoder makes them: one string per request.
	b.Run("5000", func(b *testing.B) {
		b.ReportAllocs()
		out := make([]NodeUsage, 0, len(names))
		for b.Loop() {
			out = l.Usages("uid", names, out[:0])
		}
	})
}
