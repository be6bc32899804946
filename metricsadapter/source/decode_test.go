package source

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestDecodeValue(t *testing.T) {
	tests := []struct {
		name       string
		path       string
		body       string
		want       float64
		wantReason Reason
	}{
		{name: "issue example", path: "{.data.load_balance}", body: `{"data":{"load_balance":0.83}}`, want: 0.83},
		{name: "integer", path: "{.load}", body: `{"load": 2}`, want: 2},
		{name: "zero", path: "{.load}", body: `{"load": 0}`, want: 0},
		{name: "exponent", path: "{.load}", body: `{"load": 8.3e-1}`, want: 0.83},
		{name: "array index", path: "{.items[1].v}", body: `{"items":[{"v":1},{"v":0.5}]}`, want: 0.5},
		{name: "filter", path: `{.items[?(@.name=="gpu")].v}`, body: `{"items":[{"name":"cpu","v":1},{"name":"gpu","v":0.7}]}`, want: 0.7},
		{name: "surrounding whitespace", path: "{.load}", body: " \n{\"load\": 1}\n ", want: 1},
		{name: "not JSON", path: "{.load}", body: `<html>oops</html>`, wantReason: ReasonInvalidJSON},
		{name: "empty body", path: "{.load}", body: ``, wantReason: ReasonInvalidJSON},
		{name: "truncated JSON", path: "{.load}", body: `{"load": 0.`, wantReason: ReasonInvalidJSON},
		{name: "trailing garbage", path: "{.load}", body: `{"load": 1} {"load": 2}`, wantReason: ReasonInvalidJSON},
		{name: "NaN literal is not JSON", path: "{.load}", body: `{"load": NaN}`, wantReason: ReasonInvalidJSON},
		{name: "missing key", path: "{.data.load_balance}", body: `{"data":{}}`, wantReason: ReasonMissingPath},
		{name: "missing parent", path: "{.data.load_balance}", body: `{}`, wantReason: ReasonMissingPath},
		{name: "index out of range", path: "{.items[3]}", body: `{"items":[1]}`, wantReason: ReasonMissingPath},
		{name: "filter matches nothing", path: `{.items[?(@.name=="gpu")].v}`, body: `{"items":[]}`, wantReason: ReasonMissingPath},
		{name: "string number", path: "{.load}", body: `{"load": "0.83"}`, wantReason: ReasonNotANumber},
		{name: "null", path: "{.load}", body: `{"load": null}`, wantReason: ReasonNotANumber},
		{name: "boolean", path: "{.load}", body: `{"load": true}`, wantReason: ReasonNotANumber},
		{name: "object", path: "{.load}", body: `{"load": {"v": 1}}`, wantReason: ReasonNotANumber},
		{name: "several values", path: "{.items[*]}", body: `{"items":[1,2]}`, wantReason: ReasonNotANumber},
		{name: "negative", path: "{.load}", body: `{"load": -0.1}`, wantReason: ReasonInvalidValue},
		{name: "overflows to Inf", path: "{.load}", body: `{"load": 1e400}`, wantReason: ReasonInvalidValue},
		{name: "too large", path: "{.load}", body: `{"load": 1, "pad": "` + strings.Repeat("x", MaxBodyBytes) + `"}`, wantReason: ReasonBodyTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			jp, err := ParsePath("test", tc.path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeValue([]byte(tc.body), jp)
			if tc.wantReason != "" {
				var pe *PollError
				if !errors.As(err, &pe) || pe.Reason != tc.wantReason {
					t.Fatalf("DecodeValue() = %v, %v; want reason %s", got, err, tc.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeValue(): %v", err)
			}
			if got != tc.want {
				t.Errorf("DecodeValue() = %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzDecodeValue feeds arbitrary bodies to the source decoder: it must
// never panic, and any value it accepts must be finite and >= 0.
func FuzzDecodeValue(f *testing.F) {
	f.Add([]byte(`{"data":{"load_balance":0.83}}`))
	f.Add([]byte(`{"data":{"load_balance":"0.83"}}`))
	f.Add([]byte(`{"data":{"load_balance":-1}}`))
	f.Add([]byte(`{"data":{"load_balance":1e999}}`))
	f.Add([]byte(`{"data":[{"load_balance":1}]}`))
	f.Add([]byte(`{"data":null}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	paths := []string{"{.data.load_balance}", "{.data[*].load_balance}", "{..load_balance}"}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range paths {
			jp, err := ParsePath("fuzz", p)
			if err != nil {
				t.Fatal(err)
			}
			v, err := DecodeValue(body, jp)
			if err != nil {
				var pe *PollError
				if !errors.As(err, &pe) {
					t.Fatalf("error without a reason: %v", err)
				}
				continue
			}
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("accepted bad value %v from %q", v, body)
			}
		}
	})
}
