package archiver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobvault/jobvault/pkg/metrics"
)

// probePeriod is how often the prober pings the backends: as often as the deployment's
// readinessProbe asks (periodSeconds: 10), and more often than Prometheus scrapes.
const probePeriod = 10 * time.Second

// backendPingTimeout bounds a ping: a backend that has not answered by then is down.
const backendPingTimeout = 5 * time.Second

// pinger is what both backends offer the prober.
type pinger interface {
	Ping(ctx context.Context) error
}

// prober pings the backends (database, store) every probePeriod, on every replica, and keeps the
// result: the readiness check (Check) and the jobvault_archiver_backend_up gauge (its Collect)
// both report it. So the backends are pinged once a period however often they are asked, and
// readiness and the gauge never disagree.
type prober struct {
	pingers map[string]pinger

	mu sync.Mutex
	// errs holds each backend's last answer; nil before the first pass.
	errs map[string]error
}

// newProber returns the prober of the two backends, those of them that can be pinged.
func newProber(records, store any) *prober {
	p := &prober{pingers: map[string]pinger{}}
	for name, b := range map[string]any{"database": records, "store": store} {
		if b, ok := b.(pinger); ok {
			p.pingers[name] = b
		}
	}
	return p
}

// probe is the prober's periodic task: it pings every backend at once and keeps the answers.
func (p *prober) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, backendPingTimeout)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs = map[string]error{}
	)
	for name, b := range p.pingers {
		wg.Go(func() {
			err := b.Ping(ctx)
			mu.Lock()
			defer mu.Unlock()
			errs[name] = err
		})
	}
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs = errs
	return nil
}

// last returns the answers of the last pass, nil before the first.
func (p *prober) last() map[string]error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errs
}

// Check is the readiness check: ready when both backends answered the last ping, so that a
// rollout waits for a replica that can write and a monitor sees one that cannot. Leader election
// does not look at readiness: a replica whose backends are down may still hold the lease, and
// then retries until they are back.
func (p *prober) Check(*http.Request) error {
	errs := p.last()
	if errs == nil {
		return errors.New("backends not probed yet")
	}
	var down []error
	for _, name := range []string{"database", "store"} {
		if err := errs[name]; err != nil {
			down = append(down, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(down...)
}

// Describe implements prometheus.Collector.
func (p *prober) Describe(ch chan<- *prometheus.Desc) { ch <- metrics.BackendUp }

// Collect reports the last pass as jobvault_archiver_backend_up, nothing before the first.
func (p *prober) Collect(ch chan<- prometheus.Metric) {
	for name, err := range p.last() {
		up := 0.0
		if err == nil {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(metrics.BackendUp, prometheus.GaugeValue, up, name)
	}
}
