// Package loadsource is a stand-in for a third-party load-index endpoint:
// GET answers {"data":{"load_balance":V}}, PUT sets V. The e2e tests and the
// demo drive the metrics adapter with it.
package loadsource

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// Source holds the current value; the zero value answers 0.
type Source struct {
	mu    sync.Mutex
	value float64
	// down makes GET answer 503, as a failing backend would.
	down bool
}

// Set changes the value served.
func (s *Source) Set(v float64) {
	s.mu.Lock()
	s.value = v
	s.mu.Unlock()
}

// SetDown makes the source fail (true) or recover (false).
func (s *Source) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// ServeHTTP implements GET (read) and PUT (body: a number, or "down"/"up").
func (s *Source) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		s.mu.Lock()
		v, down := s.value, s.down
		s.mu.Unlock()
		if down {
			http.Error(w, "backend unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"load_balance": v}})
	case http.MethodPut:
		b, err := io.ReadAll(io.LimitReader(r.Body, 64))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch body := strings.TrimSpace(string(b)); body {
		case "down", "up":
			s.SetDown(body == "down")
		default:
			v, err := strconv.ParseFloat(body, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				http.Error(w, fmt.Sprintf("want a number, \"down\" or \"up\", got %q", body), http.StatusBadRequest)
				return
			}
			s.Set(v)
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "GET or PUT", http.StatusMethodNotAllowed)
	}
}
