package metrics

import "github.com/prometheus/client_golang/prometheus"

// BreakerStates are the states a circuit breaker reports.
var BreakerStates = []string{"closed", "open", "half_open"}

// Breaker is one circuit breaker's state: of a provider endpoint, a tool or an MCP server.
type Breaker struct {
	Kind  string // "provider", "tool" or "mcp_server"
	Name  string // the provider's, tool's or server's configured name
	State string // one of BreakerStates
}

// AddBreakers exports the breakers list returns, read at each scrape, as
// parley_breaker_state{kind,name,state}: 1 for the breaker's current state, 0 for the others.
// Their names come from the configuration, so their number is bounded by it.
func (m *Metrics) AddBreakers(list func() []Breaker) {
	m.reg.MustRegister(&breakerCollector{list: list})
}

var breakerDesc = prometheus.NewDesc("parley_breaker_state",
	"Circuit breakers of provider endpoints, tools and MCP servers: 1 for the breaker's current state (closed, open, half_open), 0 for the others.",
	[]string{"kind", "name", "state"}, nil)

type breakerCollector struct{ list func() []Breaker }

func (c *breakerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- breakerDesc }

func (c *breakerCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[[2]string]bool{}
	for _, b := range c.list() {
		key := [2]string{b.Kind, b.Name}
		if seen[key] || len(seen) >= 10*MaxLabelValues {
			continue
		}
		seen[key] = true
		for _, s := range BreakerStates {
			v := 0.0
			if s == b.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(breakerDesc, prometheus.GaugeValue, v, b.Kind, b.Name, s)
		}
	}
}
