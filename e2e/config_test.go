//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The collector and Jaeger configs are valid for the collector that Jaeger
// is built on: Jaeger's validate command decodes them strictly. That
// collector (v0.140, in Jaeger 2.13) predates the OTLP/gRPC exporter's
// rename to otlp_grpc (v0.144): it is given the collector config with the
// exporter under otlp, the name it knows and newer collectors still accept
// as an alias; every other component and setting is checked as written.
func TestConfigsValidate(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	bin := jaegerBinary(t, root)
	raw, err := os.ReadFile(filepath.Join(root, "otel", "collector.yaml"))
	require.NoError(t, err)
	renamed := regexp.MustCompile(`(?m)\botlp_grpc(/|:)`).ReplaceAllString(string(raw), "otlp$1")
	require.NotEqual(t, string(raw), renamed, "the collector config names its exporter otlp_grpc")
	older := filepath.Join(t.TempDir(), "collector.yaml")
	require.NoError(t, os.WriteFile(older, []byte(renamed), 0o644))
	for _, cfg := range []string{older, filepath.Join(root, "tools", "jaeger", "config.yaml")} {
		out, err := exec.Command(bin, "validate", "--config", cfg).CombinedOutput()
		assert.NoError(t, err, "%s: %s", cfg, out)
		assert.NotContains(t, string(out), "error", cfg)
	}
}

// compose is what TestComposeFile reads of docker-compose.otel.yml.
type compose struct {
	Services map[string]struct {
		Image    string   `yaml:"image"`
		Command  []string `yaml:"command"`
		Ports    []string `yaml:"ports"`
		Profiles []string `yaml:"profiles"`
		Volumes  []string `yaml:"volumes"`
	} `yaml:"services"`
}

// mounts returns a service's bind mounts, container path → the file or
// directory of the repository it names.
func (c compose) mounts(t *testing.T, service string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, v := range c.Services[service].Volumes {
		parts := strings.Split(v, ":")
		require.GreaterOrEqual(t, len(parts), 2, "%s: volume %q is a bind mount, host:container", service, v)
		require.True(t, strings.HasPrefix(parts[0], "./"), "%s: volume %q mounts a file of the repository", service, v)
		m[parts[1]] = filepath.Clean(parts[0])
	}
	return m
}

// The compose file is well-formed, pins its images, binds its ports to
// 127.0.0.1 only, and mounts files that exist: the collector config checked
// above, the alert rules and the dashboard that the real Prometheus of
// TestPrometheusScrapesTheOutage is given, and Prometheus's and Grafana's
// configs, which name those files where they are mounted.
func TestComposeFile(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	var c compose
	readYAML(t, filepath.Join(root, "docker-compose.otel.yml"), &c)
	require.ElementsMatch(t, []string{"jaeger", "otel-collector", "prometheus", "grafana"}, keys(c.Services))

	jaeger := c.Services["jaeger"]
	assert.Regexp(t, `^jaegertracing/jaeger:2\.\d+\.\d+$`, jaeger.Image, "a pinned Jaeger 2.x")
	assert.ElementsMatch(t, []string{"127.0.0.1:16686:16686", "127.0.0.1:4317:4317", "127.0.0.1:4318:4318"}, jaeger.Ports)
	for name, image := range map[string]string{
		"otel-collector": `^otel/opentelemetry-collector-contrib:\d+\.\d+\.\d+$`,
		"prometheus":     `^prom/prometheus:v\d+\.\d+\.\d+$`,
		"grafana":        `^grafana/grafana:\d+\.\d+\.\d+$`,
	} {
		assert.Regexp(t, image, c.Services[name].Image, "%s: a pinned image", name)
		assert.Equal(t, []string{"collector"}, c.Services[name].Profiles, name)
	}
	for name, s := range c.Services {
		for _, p := range s.Ports {
			assert.True(t, strings.HasPrefix(p, "127.0.0.1:"), "%s publishes %s on 127.0.0.1 only", name, p)
		}
		for _, host := range c.mounts(t, name) {
			_, err := os.Stat(filepath.Join(root, host))
			assert.NoError(t, err, "%s mounts %s", name, host)
		}
	}

	// The collector's config is the one TestConfigsValidate checks and
	// TestCollectorConfig reads.
	assert.Equal(t, map[string]string{"/etc/otelcol-contrib/config.yaml": "otel/collector.yaml"}, c.mounts(t, "otel-collector"))

	// Prometheus: its config reads the alert rules where they are mounted,
	// and exemplars are stored.
	pm := c.mounts(t, "prometheus")
	require.Equal(t, "deploy/prometheus/prometheus.yml", pm["/etc/prometheus/prometheus.yml"])
	assert.Contains(t, c.Services["prometheus"].Command, "--config.file=/etc/prometheus/prometheus.yml")
	assert.Contains(t, c.Services["prometheus"].Command, "--enable-feature=exemplar-storage")
	var promCfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, filepath.Join(root, pm["/etc/prometheus/prometheus.yml"]), &promCfg)
	var rules []string
	for _, f := range promCfg.RuleFiles {
		rules = append(rules, pm[f])
	}
	assert.Equal(t, []string{alertRules}, rules, "Prometheus's rule files are the mounted %s", alertRules)
	require.Len(t, promCfg.ScrapeConfigs, 1)
	assert.Equal(t, []string{"otel-collector:8889"}, promCfg.ScrapeConfigs[0].StaticConfigs[0].Targets, "the collector's prometheus exporter")

	// Grafana: the provisioning mounted whole, a dashboard provider whose
	// path holds the mounted dashboard, and a Prometheus data source whose
	// exemplars link to a provisioned Jaeger.
	gm := c.mounts(t, "grafana")
	require.Equal(t, "deploy/grafana/provisioning", gm["/etc/grafana/provisioning"])
	var dashboards struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(root, gm["/etc/grafana/provisioning"], "dashboards", "retrace.yml"), &dashboards)
	require.Len(t, dashboards.Providers, 1)
	var provided []string
	for ctr, host := range gm {
		if path.Dir(ctr) == dashboards.Providers[0].Options.Path {
			provided = append(provided, host)
		}
	}
	assert.Equal(t, []string{dashboardFile}, provided, "the provider's path holds the mounted %s", dashboardFile)
	var sources struct {
		Datasources []struct {
			UID      string `yaml:"uid"`
			Type     string `yaml:"type"`
			URL      string `yaml:"url"`
			JSONData struct {
				Exemplars []struct {
					Name          string `yaml:"name"`
					DatasourceUID string `yaml:"datasourceUid"`
				} `yaml:"exemplarTraceIdDestinations"`
			} `yaml:"jsonData"`
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(root, gm["/etc/grafana/provisioning"], "datasources", "retrace.yml"), &sources)
	types := map[string]string{}
	for _, d := range sources.Datasources {
		types[d.UID] = d.Type
	}
	var linked bool
	for _, d := range sources.Datasources {
		if d.Type != "prometheus" {
			continue
		}
		assert.Equal(t, "http://prometheus:9090", d.URL)
		for _, e := range d.JSONData.Exemplars {
			assert.Equal(t, "trace_id", e.Name, "the exemplar label the OTel exporter writes")
			assert.Equal(t, "jaeger", types[e.DatasourceUID], "exemplars open traces in a provisioned Jaeger")
			linked = true
		}
	}
	assert.True(t, linked, "the Prometheus data source links exemplars to traces")

	// The dashboard's panels with exemplars draw them, and every panel
	// queries the dashboard's Prometheus variable.
	var dash struct {
		Panels []struct {
			Title      string `json:"title"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Exemplar bool `json:"exemplar"`
			} `json:"targets"`
		} `json:"panels"`
	}
	rawDash, err := os.ReadFile(filepath.Join(root, dashboardFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(rawDash, &dash))
	exemplars := 0
	for _, p := range dash.Panels {
		assert.Equal(t, "${datasource}", p.Datasource.UID, "panel %q", p.Title)
		for _, tg := range p.Targets {
			if tg.Exemplar {
				exemplars++
			}
		}
	}
	assert.Positive(t, exemplars, "some panels show exemplars")
}

// The compose file's Prometheus config, as the container reads it, passes
// promtool check config, which loads the rule files it names: each path in
// the container is replaced by the repository's file mounted there.
func TestComposePrometheusConfig(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	_, promtool := prometheusTools(t)
	var c compose
	readYAML(t, filepath.Join(root, "docker-compose.otel.yml"), &c)
	mounts := c.mounts(t, "prometheus")
	raw, err := os.ReadFile(filepath.Join(root, mounts["/etc/prometheus/prometheus.yml"]))
	require.NoError(t, err)
	var pairs []string
	for ctr, host := range mounts {
		pairs = append(pairs, ctr, filepath.Join(root, host))
	}
	cfg := filepath.Join(t.TempDir(), "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(strings.NewReplacer(pairs...).Replace(string(raw))), 0o644))
	out, err := exec.Command(promtool, "check", "config", cfg).CombinedOutput()
	require.NoError(t, err, "promtool check config: %s", out)
	assert.Contains(t, string(out), fmt.Sprintf("SUCCESS: %d rules found", len(ruleNames(t, filepath.Join(root, alertRules)))),
		"the rules, loaded from where the config names them")
	t.Logf("promtool check config (the compose file's Prometheus):\n%s", out)
}

// The collector config: memory_limiter first in every pipeline, the
// prometheus exporter speaking OpenMetrics (exemplars), and no exporter
// under a name deprecated in the pinned collector.
func TestCollectorConfig(t *testing.T) {
	var cfg struct {
		Processors map[string]any            `yaml:"processors"`
		Exporters  map[string]map[string]any `yaml:"exporters"`
		Service    struct {
			Pipelines map[string]struct {
				Receivers  []string `yaml:"receivers"`
				Processors []string `yaml:"processors"`
				Exporters  []string `yaml:"exporters"`
			} `yaml:"pipelines"`
		} `yaml:"service"`
	}
	readYAML(t, filepath.Join("..", "otel", "collector.yaml"), &cfg)
	require.Contains(t, cfg.Processors, "memory_limiter")
	require.NotEmpty(t, cfg.Service.Pipelines)
	for name, p := range cfg.Service.Pipelines {
		require.NotEmpty(t, p.Processors, name)
		assert.Equal(t, "memory_limiter", p.Processors[0], "pipeline %s: memory_limiter first", name)
		for _, e := range p.Exporters {
			assert.Contains(t, cfg.Exporters, e, "pipeline %s: exporter %s is configured", name, e)
		}
	}
	for name := range cfg.Exporters {
		kind, _, _ := strings.Cut(name, "/")
		assert.NotContains(t, []string{"otlp", "otlphttp"}, kind, "exporter %s: otlp and otlphttp are deprecated aliases of otlp_grpc and otlp_http", name)
	}
	require.Contains(t, cfg.Exporters, "prometheus")
	assert.Equal(t, true, cfg.Exporters["prometheus"]["enable_open_metrics"], "the prometheus exporter keeps exemplars")
}

func readYAML(t *testing.T, file string, out any) {
	t.Helper()
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, out), file)
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
