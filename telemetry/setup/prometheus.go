package setup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Setup serves Prometheus itself rather than through autoexport's
// "prometheus", which it otherwise follows (the variables, their defaults,
// a registry of its own rather than the global one, the path /metrics):
// autoexport's endpoint never speaks OpenMetrics, the only text format that
// carries exemplars, so a histogram bucket could not link to the trace it
// came from; its shutdown does not wait for the server's goroutine; and it
// reads the process environment, which WithEnv does not reach.

// prometheusReader is the OTel Prometheus exporter (a pull reader: each
// scrape collects) with the HTTP server that serves it.
type prometheusReader struct {
	sdkmetric.Reader
	srv    *http.Server
	served chan struct{} // closed when the server's goroutine has returned
}

// newPrometheusReader listens on addr and serves the meter provider's
// metrics at /metrics, as OpenMetrics to a scraper that asks for it (as
// Prometheus does) and as Prometheus's text format to one that does not.
// It returns the reader and the scrape URL, whose port is the one bound
// (addr may name port 0: any free one).
func newPrometheusReader(addr string) (*prometheusReader, string, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, "", fmt.Errorf("setup: the Prometheus exporter: %w", err)
	}
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, "", errors.Join(fmt.Errorf("setup: the Prometheus endpoint (OTEL_EXPORTER_PROMETHEUS_HOST, _PORT): %w", err),
			exp.Shutdown(context.Background()))
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	r := &prometheusReader{
		Reader: exp,
		// Bounded reads and writes: the endpoint may face a network.
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       5 * time.Second,
			WriteTimeout:      10 * time.Second,
			IdleTimeout:       120 * time.Second,
		},
		served: make(chan struct{}),
	}
	go func() {
		defer close(r.served)
		if err := r.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			otel.Handle(fmt.Errorf("setup: the Prometheus endpoint stopped: %w", err))
		}
	}()
	return r, "http://" + lis.Addr().String() + "/metrics", nil
}

// Shutdown stops the server, then the reader: no scrape is answered once
// the provider is shut down, and the server's goroutine has returned when
// Shutdown does, so that a program (or a test's leak check) that shuts the
// provider down is left with no goroutine of it. Scrapes still in flight
// at ctx's end are cut.
func (r *prometheusReader) Shutdown(ctx context.Context) error {
	err := r.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, r.srv.Close())
	}
	<-r.served
	return errors.Join(err, r.Reader.Shutdown(ctx))
}
