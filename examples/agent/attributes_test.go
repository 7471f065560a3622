package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/retrace-go/retrace/internal/attrs"
)

// notEmittedByTheDemo are the declared keys and events that no scenario of
// the demo writes, each with the reason. Every other declared key must show
// up in some scenario's spans, events or metrics, so that a key the code no
// longer writes is deleted from telemetry rather than documented forever.
var notEmittedByTheDemo = map[string]string{
	// The incident's loops have no Name; runtime.Loop sets the key when one has.
	"gen_ai.agent.name": "set on invoke_agent only for a named loop",
	// The demo's layers all record on one provider; middleware's tests give
	// an SDK request a provider that records nothing.
	"retrace.calls.untraced": "only when a layer's spans are not recorded beneath a recorded root",
	// The mcp scenario's server is a child process over stdio, whose tools
	// answer; contrib/mcp's tests run one over Streamable HTTP and make it
	// answer JSON-RPC errors.
	"mcp.session.id":           "only over Streamable HTTP, whose server gives the session an ID; the demo's runs over stdio",
	"network.protocol.name":    "only over Streamable HTTP; the demo's MCP server runs over stdio",
	"network.protocol.version": "only over Streamable HTTP; the demo's MCP server runs over stdio",
	"rpc.response.status_code": "only on an MCP request answered with a JSON-RPC error; the demo's tool answers isError",
}

// keySeen is where a key was first seen, for the failure messages.
type keySeen map[string]string

func (k keySeen) add(key, where string) {
	if _, ok := k[key]; !ok {
		k[key] = where
	}
}

// Every attribute key on every span, span event and metric data point the
// demo's scenarios write is declared in package telemetry (an MCP key in
// contrib/mcp, the adapter that writes it), and every key declared there is
// written by some scenario (or listed above with why not).
func TestEveryEmittedKeyIsDeclared(t *testing.T) {
	core, err := attrs.Load("../../telemetry")
	require.NoError(t, err)
	conv, err := attrs.Load("../../internal/semconv")
	require.NoError(t, err)
	mcp, err := attrs.Load("../../contrib/mcp")
	require.NoError(t, err)
	reg, err := attrs.Merge(core, conv, mcp)
	require.NoError(t, err)

	// crash-resume's task runs in child processes, which export their spans
	// over OTLP to the endpoint their environment names: this collector.
	col := startCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.addr)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	// The fleet over Redis runs a command of contrib/redis from the
	// repository's root; here it runs in memory.
	t.Setenv("REDIS_ADDR", "")

	reader := sdkmetric.NewManualReader()
	d, err := newDemo(context.Background(), options{timeScale: 0.0001, model: "gpt-4o-mini", metricReader: reader}, noEnv, &bytes.Buffer{})
	require.NoError(t, err)
	defer d.close()

	ran := 0
	for _, sc := range scenarios() {
		res, err := d.scenario(context.Background(), sc)
		require.NoError(t, err, sc.name)
		require.Empty(t, res.Problems, sc.name)
		if res.Skipped != "" {
			// Only the temporal scenario is ever not run: its keys are
			// then not looked for, and under CI it must run.
			if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
				t.Fatalf("%s: %s", sc.name, res.Skipped)
			}
			t.Logf("%s: %s", sc.name, res.Skipped)
			continue
		}
		if sc.name == "temporal" {
			temporal, err := attrs.Load("../../contrib/temporal")
			require.NoError(t, err)
			reg, err = attrs.Merge(reg, temporal)
			require.NoError(t, err)
		}
		ran++
	}
	require.Positive(t, ran)

	keys, events := keySeen{}, keySeen{}
	d.spans.mu.Lock()
	for _, spans := range d.spans.byTrace {
		for _, s := range spans {
			if s.InstrumentationScope().Name == temporalTracer {
				continue // Temporal's own spans carry Temporal's keys and events, not retrace's
			}
			for _, kv := range s.Attributes() {
				keys.add(string(kv.Key), "span "+s.Name())
			}
			for _, e := range s.Events() {
				events.add(e.Name, "span "+s.Name())
				for _, kv := range e.Attributes {
					keys.add(string(kv.Key), "event "+e.Name)
				}
			}
			// The resource is retrace's only where it sets service.name;
			// the SDK's own telemetry.sdk.* keys are not checked.
			if v, ok := s.Resource().Set().Value("service.name"); ok && v.AsString() != "" {
				keys.add("service.name", "resource")
			}
		}
	}
	d.spans.mu.Unlock()
	childSpans := col.collect(keys, events)
	assert.Positive(t, childSpans, "crash-resume's children exported their spans")

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sets, ok := pointSets(m.Data)
			if !ok {
				t.Errorf("metric %s: the test does not read a %T's attributes", m.Name, m.Data)
			}
			for _, set := range sets {
				for _, kv := range set.ToSlice() {
					keys.add(string(kv.Key), "metric "+m.Name)
				}
			}
		}
	}

	for _, k := range sortedKeys(keys) {
		if _, ok := reg.Key(k); !ok {
			t.Errorf("%s (first on %s) is not declared in package telemetry (nor, for an MCP key, in contrib/mcp): declare it there, with a comment", k, keys[k])
		}
	}
	for _, e := range sortedKeys(events) {
		if _, ok := reg.Event(e); !ok {
			t.Errorf("the event %s (first on %s) is not declared in package telemetry (nor in contrib/mcp)", e, events[e])
		}
	}
	for _, k := range reg.Keys {
		_, seen := keys[k.Name]
		_, allowed := notEmittedByTheDemo[k.Name]
		switch {
		case !seen && !allowed:
			t.Errorf("%s (%s, %s) is declared, but no scenario writes it: delete it if nothing does, or list it in notEmittedByTheDemo with the reason", k.Const, k.File, k.Name)
		case seen && allowed:
			t.Errorf("%s (%s, %s) is written by the demo (%s): take it off notEmittedByTheDemo", k.Const, k.File, k.Name, keys[k.Name])
		}
	}
	for _, e := range reg.Events {
		_, seen := events[e.Name]
		_, allowed := notEmittedByTheDemo[e.Name]
		switch {
		case !seen && !allowed:
			t.Errorf("telemetry.%s (%s) is declared, but no scenario adds it: delete it if nothing does, or list it in notEmittedByTheDemo with the reason", e.Const, e.Name)
		case seen && allowed:
			t.Errorf("telemetry.%s (%s) is added by the demo (%s): take it off notEmittedByTheDemo", e.Const, e.Name, events[e.Name])
		}
	}
	for name := range notEmittedByTheDemo {
		_, isKey := reg.Key(name)
		_, isEvent := reg.Event(name)
		assert.True(t, isKey || isEvent, "notEmittedByTheDemo lists %s, which neither telemetry nor contrib/mcp declares", name)
	}
}

func sortedKeys(m keySeen) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// pointSets returns the attributes of each data point of a metric; ok is
// false for an aggregation it does not know, which the test must learn.
func pointSets(data metricdata.Aggregation) (sets []attribute.Set, ok bool) {
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		return attributesOf(d.DataPoints, func(p metricdata.DataPoint[int64]) attribute.Set { return p.Attributes }), true
	case metricdata.Sum[float64]:
		return attributesOf(d.DataPoints, func(p metricdata.DataPoint[float64]) attribute.Set { return p.Attributes }), true
	case metricdata.Gauge[int64]:
		return attributesOf(d.DataPoints, func(p metricdata.DataPoint[int64]) attribute.Set { return p.Attributes }), true
	case metricdata.Gauge[float64]:
		return attributesOf(d.DataPoints, func(p metricdata.DataPoint[float64]) attribute.Set { return p.Attributes }), true
	case metricdata.Histogram[int64]:
		return attributesOf(d.DataPoints, func(p metricdata.HistogramDataPoint[int64]) attribute.Set { return p.Attributes }), true
	case metricdata.Histogram[float64]:
		return attributesOf(d.DataPoints, func(p metricdata.HistogramDataPoint[float64]) attribute.Set { return p.Attributes }), true
	}
	return nil, false
}

func attributesOf[P any](points []P, set func(P) attribute.Set) []attribute.Set {
	out := make([]attribute.Set, 0, len(points))
	for _, p := range points {
		out = append(out, set(p))
	}
	return out
}

// collector is an OTLP gRPC trace receiver on 127.0.0.1 for the child
// processes' spans.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	addr string
	mu   sync.Mutex
	reqs []*collectortrace.ExportTraceServiceRequest
}

func startCollector(t *testing.T) *collector {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	col := &collector{addr: lis.Addr().String()}
	collectortrace.RegisterTraceServiceServer(srv, col)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return col
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// collect adds the keys and events of the spans received to keys and
// events, and returns how many spans there were.
func (c *collector) collect(keys, events keySeen) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, req := range c.reqs {
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					keys.add(a.Key, "a child's resource")
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					n++
					for _, a := range s.Attributes {
						keys.add(a.Key, "a child's span "+s.Name)
					}
					for _, e := range s.Events {
						events.add(e.Name, "a child's span "+s.Name)
						for _, a := range e.Attributes {
							keys.add(a.Key, "a child's event "+e.Name)
						}
					}
				}
			}
		}
	}
	return n
}
