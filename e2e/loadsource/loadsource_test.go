package loadsource

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestSource(t *testing.T) {
	s := &Source{}
	tests := []struct {
		name, method, body string
		wantCode           int
		wantBody           string
	}{
		{name: "initial zero", method: "GET", wantCode: 200, wantBody: `{"data":{"load_balance":0}}`},
		{name: "set", method: "PUT", body: "0.83", wantCode: 204},
		{name: "read back", method: "GET", wantCode: 200, wantBody: `{"data":{"load_balance":0.83}}`},
		{name: "reject text", method: "PUT", body: "high", wantCode: 400},
		{name: "reject NaN", method: "PUT", body: "NaN", wantCode: 400},
		{name: "go down", method: "PUT", body: "down", wantCode: 204},
		{name: "down answers 503", method: "GET", wantCode: 503},
		{name: "come back", method: "PUT", body: "up", wantCode: 204},
		{name: "value kept", method: "GET", wantCode: 200, wantBody: `{"data":{"load_balance":0.83}}`},
		{name: "other method", method: "POST", wantCode: 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest(tc.method, "/load", strings.NewReader(tc.body)))
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d (%s)", rec.Code, tc.wantCode, rec.Body)
			}
			if tc.wantBody != "" && strings.TrimSpace(rec.Body.String()) != tc.wantBody {
				t.Errorf("body %s, want %s", rec.Body, tc.wantBody)
			}
		})
	}
}
