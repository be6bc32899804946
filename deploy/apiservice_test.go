package deploy

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/capscale/capscale/metricsadapter/apiservice"
)

// TestRegistrationIsDeploysAPIService: the APIService the adapter registers
// when none is (--register-apiservice) is the one deploy/ (and helm
// install) applies, field for field.
func TestRegistrationIsDeploysAPIService(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "metrics-adapter", "apiservice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want apiregv1.APIService
	if err := yaml.UnmarshalStrict(b, &want); err != nil {
		t.Fatal(err)
	}
	got := apiservice.Registration(apiservice.Service{Namespace: "capscale-system", Name: "capscale-metrics-adapter"}, nil, nil)
	if !reflect.DeepEqual(got.Spec, want.Spec) || got.Name != want.Name || !reflect.DeepEqual(got.Labels, want.Labels) {
		t.Errorf("the adapter registers\n%+v %v\ndeploy/ applies\n%+v %v", got.Spec, got.Labels, want.Spec, want.Labels)
	}
}
