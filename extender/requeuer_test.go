package extender

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestRequeuePatch: the patch names the pod's UID beside the condition, so
// that the apiserver refuses it on any other object.
func TestRequeuePatch(t *testing.T) {
	b, err := requeuePatch("uid-w", time.Unix(1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata struct {
			UID types.UID `json:"uid"`
		} `json:"metadata"`
		Status v1.PodStatus `json:"status"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	if got.Metadata.UID != "uid-w" {
		t.Errorf("patch %s: metadata.uid = %q, want uid-w", b, got.Metadata.UID)
	}
	if c := got.Status.Conditions; len(c) != 1 || c[0].Type != FreedConditionType || c[0].Status != v1.ConditionTrue {
		t.Errorf("patch %s: conditions = %+v, want one %s=True", b, c, FreedConditionType)
	}
}

// uidCheckingAPI makes a fake clientset refuse a pods/status patch whose
// metadata.uid differs from the stored pod's, as kube-apiserver does
// (rest.BeforeUpdate: metadata.uid is immutable, 422 Invalid); the fake
// tracker alone would overwrite the UID.
func uidCheckingAPI(cs *fake.Clientset) {
	cs.PrependReactor("patch", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		pa := action.(k8stesting.PatchAction)
		var patch struct {
			Metadata struct {
				UID types.UID `json:"uid"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &patch); err != nil || patch.Metadata.UID == "" {
			return false, nil, nil
		}
		obj, err := cs.Tracker().Get(v1.SchemeGroupVersion.WithResource("pods"), pa.GetNamespace(), pa.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil, nil
		}
		if uid := obj.(*v1.Pod).UID; uid != patch.Metadata.UID {
			return true, nil, apierrors.NewInvalid(v1.SchemeGroupVersion.WithKind("Pod").GroupKind(), pa.GetName(), field.ErrorList{
				field.Invalid(field.NewPath("metadata", "uid"), patch.Metadata.UID, "field is immutable"),
			})
		}
		return false, nil, nil
	})
}

func hasFreedCondition(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == FreedConditionType {
			return true
		}
	}
	return false
}

// TestRequeuerRecreatedPod is issue 31's second fault: a waiting pod
// deleted and re-created under the same name before the requeue write. The
// new pod must not get the condition, and the old one is forgotten at once
// (no retry of the write).
func TestRequeuerRecreatedPod(t *testing.T) {
	tests := []struct {
		name string
		// stored is the UID of the pod named "w" the API server has.
		stored        types.UID
		wantCondition bool
		wantResult    string
		wantWaiting   int
	}{
		{name: "same pod: touched", stored: "uid-w", wantCondition: true, wantResult: "requeued", wantWaiting: 1},
		{name: "re-created pod: left alone, the old one forgotten", stored: "uid-new", wantResult: "gone"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stored := pod("w", "", 1)
			stored.UID = tc.stored
			cs := fake.NewClientset(stored)
			uidCheckingAPI(cs)
			w := NewWaiting(nil)
			l := NewLedger(LedgerOptions{DefaultCapacity: 10})
			w.Rejected("uid-w", "ns", "w", 0, 1)
			m := NewMetrics(nil)
			r := NewRequeuer(w, l, cs, 100, 100, m)
			r.touch(context.Background(), Touch{UID: "uid-w", Namespace: "ns", Name: "w"})

			got, err := cs.CoreV1().Pods("ns").Get(context.Background(), "w", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got.UID != tc.stored {
				t.Errorf("pod w has UID %s after the touch, want %s unchanged", got.UID, tc.stored)
			}
			if c := hasFreedCondition(got); c != tc.wantCondition {
				t.Errorf("pod w (UID %s) has the %s condition: %v, want %v", got.UID, FreedConditionType, c, tc.wantCondition)
			}
			if n := testutil.ToFloat64(m.RequeueWrites.WithLabelValues(tc.wantResult)); n != 1 {
				t.Errorf("requeue_writes_total{result=%q} = %v, want 1", tc.wantResult, n)
			}
			if n := w.Len(); n != tc.wantWaiting {
				t.Errorf("waiting pods = %d, want %d", n, tc.wantWaiting)
			}
		})
	}
}

func TestOtherPod(t *testing.T) {
	gk := v1.SchemeGroupVersion.WithKind("Pod").GroupKind()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "uid immutable", err: apierrors.NewInvalid(gk, "w", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "x", "field is immutable")}), want: true},
		{name: "another invalid field", err: apierrors.NewInvalid(gk, "w", field.ErrorList{field.Invalid(field.NewPath("status", "conditions"), "x", "bad")})},
		{name: "conflict", err: apierrors.NewConflict(v1.Resource("pods"), "w", nil)},
		{name: "not found", err: apierrors.NewNotFound(v1.Resource("pods"), "w")},
		{name: "nil"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := otherPod(tc.err); got != tc.want {
				t.Errorf("otherPod(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
