package publisher

// Node states in capscale_extender_capacity_nodes.
const (
	statePublished = "published"
	stateInvalid   = "invalid"
	stateForeign   = "foreign"
)

// nodeState is a node's state and, when invalid or foreign, why.
type nodeState struct{ state, why string }

// setState records node's state (the zero value forgets it) and reports
// whether it changed.
func (p *Publisher) setState(node string, s nodeState) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.state[node]
	if old == s {
		return false
	}
	if old.state != s.state {
		if old.state != "" {
			p.counts[old.state]--
			p.states.WithLabelValues(old.state).Set(float64(p.counts[old.state]))
		}
		if s.state != "" {
			p.counts[s.state]++
			p.states.WithLabelValues(s.state).Set(float64(p.counts[s.state]))
		}
	}
	if s.state == "" {
		delete(p.state, node)
	} else {
		p.state[node] = s
	}
	return true
}

// inState lists the nodes last seen in state.
func (p *Publisher) inState(state string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for name, s := range p.state {
		if s.state == state {
			out = append(out, name)
		}
	}
	return out
}

// stateOf is node's last state.
func (p *Publisher) stateOf(node string) string {
	return p.stateOfNode(node).state
}

// stateOfNode is node's last state and why.
func (p *Publisher) stateOfNode(node string) nodeState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state[node]
}

// setDrawsAll records whether node draws all.
func (p *Publisher) setDrawsAll(node string, all bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if all {
		p.drawing[node] = true
	} else {
		delete(p.drawing, node)
	}
}

// drawsAll reports whether node was last seen drawing all.
func (p *Publisher) drawsAll(node string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drawing[node]
}

// drawnOn is Options.Drawn of node; 0 without one.
func (p *Publisher) drawnOn(node string) int64 {
	if p.drawn == nil {
		return 0
	}
	return p.drawn(node)
}
