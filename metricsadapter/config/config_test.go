package config

import (
	"strings"
	"testing"
	"time"
)

const issueExample = `
sources:
  - name: gpu-load
    url: https://backend.example/internal/subtask/load
    jsonPath: '{.data.load_balance}'
    interval: 30s
    timeout: 5s
    maxAge: 2m
    fallback: 0.6
    tls: {caFile: /path, insecureSkipVerify: false}
    headers: {X-Api-Key: secret-value}
stepPolicies:
  - workload: {namespace: aicloud, kind: Deployment, name: webui}
    source: gpu-load
    scaleUpAbove: 0.8
    scaleDownBelow: 0.5
    stepUp: 3
    stepDown: 1
    minReplicas: 0
    maxReplicas: 20
    minPodAge: 10m
    interval: 5m
`

func TestDecodeIssueExample(t *testing.T) {
	cfg, err := Decode([]byte(issueExample))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	s := cfg.Sources[0]
	if s.Name != "gpu-load" || s.Interval.Duration != 30*time.Second || s.Timeout.Duration != 5*time.Second ||
		s.MaxAge.Duration != 2*time.Minute || s.Fallback == nil || *s.Fallback != 0.6 || s.TLS.CAFile != "/path" ||
		s.Headers["X-Api-Key"] != "secret-value" {
		t.Errorf("source decoded wrong: %+v", s)
	}
	p := cfg.StepPolicies[0]
	if p.Workload != (WorkloadRef{Namespace: "aicloud", Kind: "Deployment", Name: "webui"}) || p.Source != "gpu-load" ||
		p.ScaleUpAbove != 0.8 || p.ScaleDownBelow != 0.5 || p.StepUp != 3 || p.StepDown != 1 || p.MinReplicas != 0 ||
		p.MaxReplicas != 20 || p.MinPodAge.Duration != 10*time.Minute || p.Interval.Duration != 5*time.Minute {
		t.Errorf("step policy decoded wrong: %+v", p)
	}
}

func TestDecodeEmpty(t *testing.T) {
	for _, in := range []string{"", "{}", "sources: []\n"} {
		if _, err := Decode([]byte(in)); err != nil {
			t.Errorf("Decode(%q): %v", in, err)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	// Each case edits the valid issue example; the error must name the field.
	tests := []struct {
		name    string
		edit    func(string) string
		wantErr []string
	}{
		{
			name:    "unknown top-level field",
			edit:    func(s string) string { return s + "extra: 1\n" },
			wantErr: []string{`unknown field "extra"`},
		},
		{
			name:    "unknown source field (typo)",
			edit:    func(s string) string { return strings.Replace(s, "maxAge: 2m", "maxage: 2m\n    maxAgee: 2m", 1) },
			wantErr: []string{"maxAgee"},
		},
		{
			name: "duplicate source name",
			edit: func(s string) string {
				return strings.Replace(s, "stepPolicies:", `  - name: gpu-load
    url: http://other.example/
    jsonPath: '{.x}'
    interval: 30s
    timeout: 5s
    maxAge: 2m
stepPolicies:`, 1)
			},
			wantErr: []string{"sources[1].name: Duplicate value"},
		},
		{
			name:    "unknown source in policy",
			edit:    func(s string) string { return strings.Replace(s, "source: gpu-load", "source: cpu-load", 1) },
			wantErr: []string{"stepPolicies[0].source: Not found", "cpu-load"},
		},
		{
			name:    "scaleDownBelow equal to scaleUpAbove",
			edit:    func(s string) string { return strings.Replace(s, "scaleDownBelow: 0.5", "scaleDownBelow: 0.8", 1) },
			wantErr: []string{"stepPolicies[0].scaleDownBelow", "must be less than scaleUpAbove"},
		},
		{
			name:    "scaleDownBelow above scaleUpAbove",
			edit:    func(s string) string { return strings.Replace(s, "scaleDownBelow: 0.5", "scaleDownBelow: 0.9", 1) },
			wantErr: []string{"stepPolicies[0].scaleDownBelow"},
		},
		{
			name:    "min greater than max",
			edit:    func(s string) string { return strings.Replace(s, "minReplicas: 0", "minReplicas: 21", 1) },
			wantErr: []string{"stepPolicies[0].minReplicas", "must not be greater than maxReplicas (20)"},
		},
		{
			name:    "negative min",
			edit:    func(s string) string { return strings.Replace(s, "minReplicas: 0", "minReplicas: -1", 1) },
			wantErr: []string{"stepPolicies[0].minReplicas"},
		},
		{
			name:    "zero stepUp",
			edit:    func(s string) string { return strings.Replace(s, "stepUp: 3", "stepUp: 0", 1) },
			wantErr: []string{"stepPolicies[0].stepUp"},
		},
		{
			name:    "zero interval",
			edit:    func(s string) string { return strings.Replace(s, "interval: 30s", "interval: 0s", 1) },
			wantErr: []string{"sources[0].interval", "positive duration"},
		},
		{
			name:    "missing interval",
			edit:    func(s string) string { return strings.Replace(s, "    interval: 30s\n", "", 1) },
			wantErr: []string{"sources[0].interval"},
		},
		{
			name:    "negative timeout",
			edit:    func(s string) string { return strings.Replace(s, "timeout: 5s", "timeout: -5s", 1) },
			wantErr: []string{"sources[0].timeout"},
		},
		{
			name:    "timeout longer than interval",
			edit:    func(s string) string { return strings.Replace(s, "timeout: 5s", "timeout: 31s", 1) },
			wantErr: []string{"sources[0].timeout", "must not be longer than interval (30s)"},
		},
		{
			name:    "maxAge shorter than interval",
			edit:    func(s string) string { return strings.Replace(s, "maxAge: 2m", "maxAge: 10s", 1) },
			wantErr: []string{"sources[0].maxAge"},
		},
		{
			name:    "not a duration",
			edit:    func(s string) string { return strings.Replace(s, "maxAge: 2m", "maxAge: soon", 1) },
			wantErr: []string{"soon"},
		},
		{
			name:    "policy interval zero",
			edit:    func(s string) string { return strings.Replace(s, "interval: 5m", "interval: 0s", 1) },
			wantErr: []string{"stepPolicies[0].interval"},
		},
		{
			name:    "negative minPodAge",
			edit:    func(s string) string { return strings.Replace(s, "minPodAge: 10m", "minPodAge: -1m", 1) },
			wantErr: []string{"stepPolicies[0].minPodAge"},
		},
		{
			name:    "jsonPath without braces",
			edit:    func(s string) string { return strings.Replace(s, "'{.data.load_balance}'", ".data.load_balance", 1) },
			wantErr: []string{"sources[0].jsonPath", "in braces"},
		},
		{
			name:    "bad jsonPath",
			edit:    func(s string) string { return strings.Replace(s, "'{.data.load_balance}'", "'{.data[}'", 1) },
			wantErr: []string{"sources[0].jsonPath"},
		},
		{
			name: "ftp url",
			edit: func(s string) string {
				return strings.Replace(s, "https://backend.example", "ftp://backend.example", 1)
			},
			wantErr: []string{"sources[0].url[scheme]"},
		},
		{
			name: "credentials in url",
			edit: func(s string) string {
				return strings.Replace(s, "https://backend.example", "https://u:hunter2@backend.example", 1)
			},
			wantErr: []string{"sources[0].url", "must not contain credentials"},
		},
		{
			name: "caFile with insecureSkipVerify",
			edit: func(s string) string {
				return strings.Replace(s, "insecureSkipVerify: false", "insecureSkipVerify: true", 1)
			},
			wantErr: []string{"sources[0].tls.insecureSkipVerify"},
		},
		{
			name:    "negative fallback",
			edit:    func(s string) string { return strings.Replace(s, "fallback: 0.6", "fallback: -1", 1) },
			wantErr: []string{"sources[0].fallback"},
		},
		{
			name:    "bad header name",
			edit:    func(s string) string { return strings.Replace(s, "X-Api-Key:", `"Bad Header":`, 1) },
			wantErr: []string{"sources[0].headers[Bad Header]"},
		},
		{
			name:    "unsupported kind",
			edit:    func(s string) string { return strings.Replace(s, "kind: Deployment", "kind: DaemonSet", 1) },
			wantErr: []string{"stepPolicies[0].workload.kind", "DaemonSet"},
		},
		{
			name: "duplicate workload even with another kind",
			edit: func(s string) string {
				return s + `  - workload: {namespace: aicloud, kind: StatefulSet, name: webui}
    source: gpu-load
    scaleUpAbove: 0.8
    scaleDownBelow: 0.5
    stepUp: 1
    stepDown: 1
    maxReplicas: 2
    interval: 1m
`
			},
			wantErr: []string{"stepPolicies[1].workload: Duplicate value"},
		},
		{
			name:    "source name not a label value",
			edit:    func(s string) string { return strings.ReplaceAll(s, "gpu-load", "gpu load") },
			wantErr: []string{"sources[0].name"},
		},
		{
			name:    "not yaml",
			edit:    func(string) string { return "sources: [" },
			wantErr: []string{"decoding config"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.edit(issueExample)))
			if err == nil {
				t.Fatal("Decode succeeded, want an error")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "secret-value") || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error leaks a secret: %v", err)
			}
		})
	}
}

func TestDecodeTooLarge(t *testing.T) {
	_, err := Decode(make([]byte, MaxFileSize+1))
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("err = %v, want a size error", err)
	}
}

// FuzzDecode feeds arbitrary bytes to the config decoder: it may reject them
// but must not panic, and whatever it accepts must validate.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(issueExample))
	f.Add([]byte(""))
	f.Add([]byte("sources: [{name: a, url: 'http://h/', jsonPath: '{.a}', interval: 1s, timeout: 1s, maxAge: 1s}]"))
	f.Add([]byte("stepPolicies: [{workload: {namespace: n, kind: Deployment, name: w}}]"))
	f.Add([]byte("{\"sources\": null}"))
	f.Add([]byte("sources: [{jsonPath: '{range .items[*]}{.x}{end}'}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Decode(data)
		if err != nil {
			return
		}
		if errs := cfg.Validate(); len(errs) > 0 {
			t.Fatalf("Decode accepted a config that does not validate: %v", errs)
		}
	})
}
