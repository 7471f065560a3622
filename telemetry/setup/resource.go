package setup

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/retrace-go/retrace/internal/semconv"
)

// newResource is the resource of every provider setup builds: the SDK's
// own attributes (telemetry.sdk.*), then OTEL_RESOURCE_ATTRIBUTES, then
// OTEL_SERVICE_NAME, all read through the configured environment, so that
// WithEnv reaches them. retrace's fallback service name (WithServiceName,
// else the program's name) is used only when neither variable names the
// service: what the operator set always wins.
func newResource(ctx context.Context, c config) (*resource.Resource, error) {
	attrs, err := parseResourceAttributes(c.getenv("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return nil, err
	}
	named := false
	for _, kv := range attrs {
		if kv.Key == semconv.ServiceName && kv.Value.AsString() != "" {
			named = true
		}
	}
	if name := strings.TrimSpace(c.getenv("OTEL_SERVICE_NAME")); name != "" {
		attrs = append(attrs, semconv.ServiceName.String(name))
	} else if !named {
		attrs = append(attrs, semconv.ServiceName.String(first(c.serviceName, filepath.Base(os.Args[0]))))
	}
	// Later attributes win over earlier ones of the same key.
	return resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...))
}

// parseResourceAttributes reads OTEL_RESOURCE_ATTRIBUTES: "k1=v1,k2=v2",
// values percent-encoded. A pair without "=" is an error that names the
// pair's key only: values may be secrets.
func parseResourceAttributes(s string) ([]attribute.KeyValue, error) {
	var out []attribute.KeyValue
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("setup: OTEL_RESOURCE_ATTRIBUTES: %q is not key=value", strings.TrimSpace(k))
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("setup: OTEL_RESOURCE_ATTRIBUTES: the value of %q is not percent-encoded", k)
		}
		out = append(out, attribute.String(k, dv))
	}
	return out, nil
}
