package wire

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// kube-scheduler's HTTPExtender decodes one JSON value from the response
// and closes the body without draining it (pkg/scheduler/extender.go,
// send). Whether its connection survives depends on how the response ends.
// This test speaks to the handler exactly that way and counts connections.
func TestSchedulerClientReusesConnection(t *testing.T) {
	h, namesArgs, _ := benchServer(&testing.B{}, 500)
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	client := &http.Client{Transport: utilnet.SetTransportDefaults(&http.Transport{})}
	body, err := json.Marshal(namesArgs)
	if err != nil {
		t.Fatal(err)
	}
	send := func(path string, body []byte, result any) {
		resp, err := client.Post(srv.URL+path, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(result); err != nil {
			t.Fatal(err)
		}
	}
	bind, err := json.Marshal(&extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "ns", PodUID: "u", Node: "n"})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		var f extenderv1.ExtenderFilterResult
		send("/filter", body, &f)
		var p extenderv1.HostPriorityList
		send("/prioritize", body, &p)
		var b extenderv1.ExtenderBindingResult
		send("/bind", bind, &b)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("60 sequential calls opened %d connections, want 1", n)
	}
}
