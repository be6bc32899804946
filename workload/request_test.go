package workload

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDecodeJSON(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		limit   int64
		wantErr error // nil, errEmptyBody, errBodyTooLarge, or errOther
	}{
		{name: "ok", body: `{"replicas":3}`},
		{name: "ok with whitespace", body: " \n{\"replicas\":3}\n\t "},
		{name: "empty", body: ``, wantErr: errEmptyBody},
		{name: "whitespace only", body: "  \n ", wantErr: errEmptyBody},
		{name: "unknown field", body: `{"replicas":3,"x":1}`, wantErr: errOther},
		{name: "two values", body: `{"replicas":3} {"replicas":4}`, wantErr: errOther},
		{name: "trailing garbage", body: `{"replicas":3} x`, wantErr: errOther},
		{name: "array", body: `[1]`, wantErr: errOther},
		{name: "truncated", body: `{"replicas":`, wantErr: errOther},
		{name: "null is a value", body: `null`},
		{name: "too large", body: `{"replicas":3}` + strings.Repeat(" ", 100), limit: 20, wantErr: errBodyTooLarge},
		{name: "too large mid-value", body: `{"replicas":` + strings.Repeat("1", 100) + `}`, limit: 20, wantErr: errBodyTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(tc.body)
			if tc.limit > 0 {
				body = http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(body), tc.limit)
			}
			var v ScaleRequest
			err := decodeJSON(body, &v)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Errorf("err = %v, want nil", err)
			case tc.wantErr == errOther && (err == nil || errors.Is(err, errEmptyBody) || errors.Is(err, errBodyTooLarge)):
				t.Errorf("err = %v, want a decoding error", err)
			case tc.wantErr != nil && tc.wantErr != errOther && !errors.Is(err, tc.wantErr):
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

var errOther = errors.New("any other error")

// FuzzDecodeBodies feeds arbitrary bytes to the decoders of every request
// body: none may panic, the size limit must always hold, and an elastic web
// spec that decodes must reach the apiserver as exactly what was sent.
func FuzzDecodeBodies(f *testing.F) {
	for _, seed := range []string{
		`{"replicas":3}`,
		`{"replicas":3,"adjustHPA":true}`,
		`{"replicas":-1}`,
		`{}`,
		``,
		`null`,
		`[]`,
		`{"image":"nginx","port":80,"singlePodQPS":10,"totalQPS":25}`,
		`{"image":"nginx","port":80,"singlePodQPS":1e-300,"totalQPS":1e300,"minReplicas":2147483647,"maxReplicas":2147483647}`,
		`{"image":"nginx","port":65536,"singlePodQPS":0,"totalQPS":-0}`,
		`{"replicas":1}{"replicas":2}`,
		`{"replicas":99999999999}`,
		"\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 512
		reader := func() io.Reader {
			return http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(string(data))), limit)
		}
		var sr ScaleRequest
		errS := decodeJSON(reader(), &sr)
		var st StartRequest
		_ = decodeJSON(reader(), &st)
		var spec map[string]json.RawMessage
		errE := decodeJSON(reader(), &spec)
		if len(data) > limit && (errS == nil || errE == nil) {
			// Deciding that the value is complete means reading to EOF, so a
			// body past the limit must never decode.
			t.Fatalf("a %d-byte body decoded past the %d-byte limit", len(data), limit)
		}
		if errE != nil || spec == nil {
			return
		}
		_ = specShapeError(spec)
		body, err := elasticWebApply("ns", "shop", spec)
		if err != nil {
			t.Fatalf("a decoded spec %q did not encode: %v", data, err)
		}
		var back struct {
			Metadata map[string]string          `json:"metadata"`
			Spec     map[string]json.RawMessage `json:"spec"`
		}
		if err := json.Unmarshal(body, &back); err != nil {
			t.Fatalf("apply body %s is not JSON: %v", body, err)
		}
		if back.Metadata["name"] != "shop" || len(back.Spec) != len(spec) {
			t.Fatalf("apply body %s does not carry the spec %q", body, data)
		}
	})
}
