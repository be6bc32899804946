package schedplugin

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/capscale/capscale/internal/underlay"
)

func TestDecodeArgs(t *testing.T) {
	unknown := func(ct, raw string) runtime.Object {
		return &runtime.Unknown{ContentType: ct, Raw: []byte(raw)}
	}
	tests := []struct {
		name    string
		obj     runtime.Object
		want    int64
		wantErr string
	}{
		{name: "no pluginConfig", obj: nil, want: DefaultCapacity},
		{name: "empty raw", obj: unknown("", ""), want: DefaultCapacity},
		{name: "null", obj: unknown(runtime.ContentTypeJSON, "null"), want: DefaultCapacity},
		{name: "empty object", obj: unknown(runtime.ContentTypeJSON, "{}"), want: DefaultCapacity},
		{name: "json", obj: unknown(runtime.ContentTypeJSON, `{"defaultCapacity": 3}`), want: 3},
		{name: "json without content type", obj: unknown("", `{"defaultCapacity": 0}`), want: 0},
		{name: "yaml", obj: unknown(runtime.ContentTypeYAML, "defaultCapacity: 7\n"), want: 7},
		{name: "largest", obj: unknown("", `{"defaultCapacity": 1048576}`), want: underlay.MaxCapacity},
		{name: "negative", obj: unknown("", `{"defaultCapacity": -1}`), wantErr: "defaultCapacity must be between 0 and 1048576, got -1"},
		{name: "too large", obj: unknown("", `{"defaultCapacity": 1048577}`), wantErr: "got 1048577"},
		{name: "a string", obj: unknown("", `{"defaultCapacity": "ten"}`), wantErr: "defaultCapacity"},
		{name: "a fraction", obj: unknown("", `{"defaultCapacity": 1.5}`), wantErr: "defaultCapacity"},
		{name: "misspelt key", obj: unknown("", `{"defaultCapacty": 3}`), wantErr: `unknown field "defaultCapacty"`},
		{name: "broken json", obj: unknown("", `{"defaultCapacity":`), wantErr: "UnderlayIP args"},
		{name: "broken yaml", obj: unknown(runtime.ContentTypeYAML, "defaultCapacity: [\n"), wantErr: "UnderlayIP args"},
		{name: "protobuf", obj: unknown(runtime.ContentTypeProtobuf, "x"), wantErr: "not supported"},
		{name: "not runtime.Unknown", obj: &metav1.Status{}, wantErr: "want *runtime.Unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeArgs(tc.obj)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("DecodeArgs error = %v, want one containing %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), Name) {
					t.Errorf("error %q does not name the plugin", err)
				}
				return
			}
			if err != nil || got.DefaultCapacity == nil || *got.DefaultCapacity != tc.want {
				t.Fatalf("DecodeArgs = %+v, %v; want defaultCapacity %d", got, err, tc.want)
			}
		})
	}
}

func TestNewRejectsBadArgs(t *testing.T) {
	if _, err := New(context.Background(), &runtime.Unknown{Raw: []byte(`{"defaultCapacity": -3}`)}, nil); err == nil {
		t.Fatal("New accepted a negative defaultCapacity")
	}
	pl, err := New(context.Background(), nil, nil)
	if err != nil || pl.Name() != Name || pl.(*Plugin).rule != (underlay.Rule{Default: DefaultCapacity}) {
		t.Fatalf("New(nil args) = %+v, %v", pl, err)
	}
}

func FuzzDecodeArgs(f *testing.F) {
	for _, s := range []string{"", "null", "{}", `{"defaultCapacity": 3}`, `{"defaultCapacity": -1}`, `{"x": 1}`, "[", `{"defaultCapacity": 1e3}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args, err := DecodeArgs(&runtime.Unknown{Raw: []byte(s)})
		if err != nil {
			return
		}
		if c := *args.DefaultCapacity; c < 0 || c > underlay.MaxCapacity {
			t.Fatalf("DecodeArgs(%q) accepted defaultCapacity %d", s, c)
		}
	})
}
