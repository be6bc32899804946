// Package extendertest builds the Pods and Nodes the extender's tests and
// benchmarks share.
package extendertest

import (
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/capscale/capscale/internal/names"
)

// Pod returns a pod in namespace "ns" asking for need underlay IPs (as a
// limit, the way users write it) and bound to node when node is not empty.
func Pod(name, node string, need int64) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{
			NodeName:   node,
			Containers: []v1.Container{{Name: "app"}},
		},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
	if need > 0 {
		p.Spec.Containers[0].Resources.Limits = v1.ResourceList{
			v1.ResourceName(names.UnderlayIPResource): *resource.NewQuantity(need, resource.DecimalSI),
		}
	}
	if node != "" {
		p.Status.Phase = v1.PodRunning
	}
	return p
}

// Node returns a node, with the capacity annotation when capacity is not "".
func Node(name, capacity string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	if capacity != "" {
		n.Annotations = map[string]string{names.UnderlayIPCapacityAnnotation: capacity}
	}
	return n
}

// RealisticNode is a full Node as a kube-scheduler without a managedFields
// transform sends it: labels, annotations, conditions, the kubelet's 50
// images and the managedFields of kubelet, kube-controller-manager and the
// cloud provider, about 17.6 KiB of JSON (5000 nodes: ~86 MiB).
func RealisticNode(i int) v1.Node {
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
		panic(err) // a test helper: a map of strings always marshals
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

// BindArgs is kube-scheduler's bind call for p on node.
func BindArgs(p *v1.Pod, node string) *extenderv1.ExtenderBindingArgs {
	return &extenderv1.ExtenderBindingArgs{PodName: p.Name, PodNamespace: p.Namespace, PodUID: p.UID, Node: node}
}
