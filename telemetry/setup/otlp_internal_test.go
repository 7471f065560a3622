package setup

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A failed export to the other protocol's well-known port says so, and
// only then.
func TestHintNamesTheOtherProtocolsPort(t *testing.T) {
	tests := []struct {
		endpoint, protocol, want string
	}{
		{"http://localhost:4317", "", "; 4317 is the OTLP/gRPC port: OTEL_EXPORTER_OTLP_PROTOCOL=grpc speaks it"},
		{"localhost:4317", "http/protobuf", "; 4317 is the OTLP/gRPC port: OTEL_EXPORTER_OTLP_PROTOCOL=grpc speaks it"},
		{"localhost:4318", "", "; 4318 is the OTLP/HTTP port: OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf speaks it"},
		{"localhost:4317", "", ""},
		{"http://localhost:4318", "", ""},
		{"https://gateway.example.net/otlp", "", ""},
	}
	for _, tt := range tests {
		vars := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": tt.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": tt.protocol}
		x, err := ReadEnv(func(k string) string { return vars[k] })
		require.NoError(t, err)
		assert.Equal(t, tt.want, x.hint(), "%s %s", tt.endpoint, tt.protocol)
	}
}
