//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The collector and Jaeger configs are valid for the collector that Jaeger
// is built on: Jaeger's validate command decodes them strictly.
func TestConfigsValidate(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	bin := jaegerBinary(t, root)
	for _, cfg := range []string{"otel/collector.yaml", "tools/jaeger/config.yaml"} {
		out, err := exec.Command(bin, "validate", "--config", filepath.Join(root, cfg)).CombinedOutput()
		assert.NoError(t, err, "%s: %s", cfg, out)
		assert.NotContains(t, string(out), "error", cfg)
	}
}

func TestComposeFile(t *testing.T) {
	raw, err := os.ReadFile("../docker-compose.otel.yml")
	require.NoError(t, err)
	var compose struct {
		Services map[string]struct {
			Image    string   `yaml:"image"`
			Ports    []string `yaml:"ports"`
			Profiles []string `yaml:"profiles"`
			Volumes  []string `yaml:"volumes"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &compose))
	jaeger := compose.Services["jaeger"]
	assert.Regexp(t, regexp.MustCompile(`^jaegertracing/jaeger:2\.\d+\.\d+$`), jaeger.Image, "a pinned Jaeger 2.x")
	assert.ElementsMatch(t, []string{"127.0.0.1:16686:16686", "127.0.0.1:4317:4317", "127.0.0.1:4318:4318"}, jaeger.Ports)
	col := compose.Services["otel-collector"]
	assert.Regexp(t, regexp.MustCompile(`^otel/opentelemetry-collector-contrib:\d+\.\d+\.\d+$`), col.Image, "a pinned contrib collector")
	assert.Equal(t, []string{"collector"}, col.Profiles)
	require.Len(t, col.Volumes, 1)
	assert.FileExists(t, filepath.Join("..", "otel", "collector.yaml"))
}
