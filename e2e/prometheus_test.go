//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The files Prometheus and Grafana are given, here and in
// docker-compose.otel.yml.
const (
	alertRules     = "deploy/prometheus/retrace-alerts.yml"
	alertRuleTests = "deploy/prometheus/retrace-alerts_test.yml"
	dashboardFile  = "deploy/grafana/retrace.json"
)

// outageScenarios are the demo's scenarios that, run round after round,
// make every alert of alertRules fire: always-503 exhausts its calls,
// insufficient-quota fails fatally, the incident and the fleet open
// breakers that reopen, and state-down degrades the shared state and
// spends the task budget.
var outageScenarios = []string{"always-503", "insufficient-quota", "incident", "fleet", "state-down"}

// prometheusTools returns the paths of prometheus and promtool, from
// Debian's package prometheus.
func prometheusTools(t *testing.T) (prometheus, promtool string) {
	t.Helper()
	var missing []string
	for _, name := range []string{"prometheus", "promtool"} {
		p, err := exec.LookPath(name)
		if err != nil {
			missing = append(missing, name)
		}
		if name == "prometheus" {
			prometheus = p
		} else {
			promtool = p
		}
	}
	if len(missing) > 0 {
		needPart(t, "%s not on PATH (Debian's package prometheus: apt-get install prometheus), so the alert rules and the dashboard cannot be checked against a real Prometheus", strings.Join(missing, " and "))
	}
	return prometheus, promtool
}

// The alert rules are valid, and their unit tests pass: promtool is
// Prometheus's own reader of them.
func TestAlertRulesPromtool(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	_, promtool := prometheusTools(t)
	for _, args := range [][]string{{"check", "rules", alertRules}, {"test", "rules", alertRuleTests}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
		assert.Contains(t, string(out), "SUCCESS", "promtool %s", strings.Join(args, " "))
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// A real Prometheus scrapes the demo, run with OTEL_METRICS_EXPORTER=prometheus
// through a lasting outage, evaluates the alert rules every second, and
// answers every query of the dashboard: each alert fires, each panel's
// queries return series, and the counters' samples carry exemplars that name
// traces.
func TestPrometheusScrapesTheOutage(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	promBin, promtool := prometheusTools(t)
	agent := buildDemo(t, root)

	target := startDemoServingMetrics(t, agent)
	p := startPrometheus(t, promBin, promtool, root, target)

	// The target is scraped.
	p.await(t, "the demo's target to be up", func() (bool, string) {
		var targets struct {
			ActiveTargets []struct {
				Health     string  `json:"health"`
				LastError  string  `json:"lastError"`
				ScrapeURL  string  `json:"scrapeUrl"`
				LastScrape float64 `json:"lastScrapeDuration"`
			} `json:"activeTargets"`
		}
		if err := p.api("/api/v1/targets", nil, &targets); err != nil || len(targets.ActiveTargets) != 1 {
			return false, fmt.Sprintf("targets: %+v, %v", targets, err)
		}
		tg := targets.ActiveTargets[0]
		return tg.Health == "up", fmt.Sprintf("%s: %s %s", tg.ScrapeURL, tg.Health, tg.LastError)
	})

	// Every alert of the rules fires.
	want := ruleNames(t, filepath.Join(root, alertRules))
	require.Len(t, want, 5)
	var firing, pending []promAlert
	p.await(t, "every alert to fire", func() (bool, string) {
		var alerts struct {
			Alerts []promAlert `json:"alerts"`
		}
		if err := p.api("/api/v1/alerts", nil, &alerts); err != nil {
			return false, err.Error()
		}
		firing, pending = firing[:0], pending[:0]
		names := map[string]bool{}
		var states []string
		for _, a := range alerts.Alerts {
			states = append(states, a.Labels["alertname"]+"="+a.State)
			if a.State == "firing" {
				firing = append(firing, a)
				names[a.Labels["alertname"]] = true
			} else {
				pending = append(pending, a)
			}
		}
		for _, n := range want {
			if !names[n] {
				return false, "not yet firing: " + n + "; alerts: " + strings.Join(states, ", ")
			}
		}
		return true, ""
	})
	sort.Slice(firing, func(i, j int) bool { return firing[i].String() < firing[j].String() })
	for _, a := range firing {
		t.Logf("FIRING %s", a)
		assert.NotEmpty(t, a.Annotations["runbook"], "%s has a runbook", a.Labels["alertname"])
		assert.Contains(t, []string{"critical", "warning"}, a.Labels["severity"])
	}
	for _, a := range pending {
		t.Logf("pending %s", a)
	}

	// Every panel's every query returns series.
	for _, q := range dashboardQueries(t, filepath.Join(root, dashboardFile)) {
		var res struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		}
		require.NoError(t, p.api("/api/v1/query", url.Values{"query": {q.expr}}, &res), "panel %q: %s", q.panel, q.expr)
		finite := 0
		for _, r := range res.Result {
			if s, ok := r.Value[1].(string); ok {
				if v, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(v) {
					finite++
				}
			}
		}
		t.Logf("panel %q: %d series (%d with a number): %s", q.panel, len(res.Result), finite, q.expr)
		assert.NotEmpty(t, res.Result, "panel %q returns no series: %s", q.panel, q.expr)
	}

	// The counters' and histograms' samples carry exemplars naming traces.
	var exemplars []struct {
		SeriesLabels map[string]string `json:"seriesLabels"`
		Exemplars    []struct {
			Labels map[string]string `json:"labels"`
		} `json:"exemplars"`
	}
	now := time.Now()
	require.NoError(t, p.api("/api/v1/query_exemplars", url.Values{
		"query": {`{__name__=~"retrace_layer_calls_total|retrace_retry_delay_seconds_bucket|gen_ai_client_operation_duration_seconds_bucket"}`},
		"start": {strconv.FormatInt(now.Add(-10*time.Minute).Unix(), 10)}, "end": {strconv.FormatInt(now.Unix(), 10)},
	}, &exemplars))
	traceID := regexp.MustCompile(`^[0-9a-f]{32}$`)
	perMetric := map[string]int{}
	for _, s := range exemplars {
		for _, e := range s.Exemplars {
			assert.Regexp(t, traceID, e.Labels["trace_id"], "an exemplar of %v", s.SeriesLabels)
			perMetric[s.SeriesLabels["__name__"]]++
		}
	}
	t.Logf("exemplars stored, by metric: %v", perMetric)
	assert.Positive(t, perMetric["retrace_layer_calls_total"], "calls carry exemplars")
	assert.Positive(t, perMetric["retrace_retry_delay_seconds_bucket"], "retry delays carry exemplars")

	// What the scrapes were.
	for _, q := range []string{
		`count_over_time(up{job="retrace-agent"}[10m])`,
		`scrape_samples_scraped{job="retrace-agent"}`,
		`scrape_duration_seconds{job="retrace-agent"}`,
		`count({job="retrace-agent", __name__=~"retrace_.*|gen_ai_.*"})`,
	} {
		var res struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		}
		require.NoError(t, p.api("/api/v1/query", url.Values{"query": {q}}, &res))
		require.Len(t, res.Result, 1, q)
		t.Logf("scrape: %s = %v", q, res.Result[0].Value[1])
	}
}

// promAlert is an alert as /api/v1/alerts answers it.
type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	Value       string            `json:"value"`
}

func (a promAlert) String() string {
	var ls []string
	for k, v := range a.Labels {
		if k != "alertname" {
			ls = append(ls, k+"="+v)
		}
	}
	sort.Strings(ls)
	return fmt.Sprintf("%s{%s} value=%s: %s", a.Labels["alertname"], strings.Join(ls, ","), a.Value, a.Annotations["summary"])
}

// ruleNames returns the alert names a rule file declares.
func ruleNames(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\S+)$`).FindAllStringSubmatch(string(raw), -1) {
		names = append(names, m[1])
	}
	return names
}

// dashboardQuery is one target of one panel.
type dashboardQuery struct{ panel, expr string }

// dashboardQueries returns every panel's targets' queries, rows' panels
// included, with Grafana's variables replaced as Grafana would on this
// Prometheus: $__rate_interval and $__interval by a window that holds a
// few of its 1 s scrapes, a query variable by its "All" value.
func dashboardQueries(t *testing.T, path string) []dashboardQuery {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name     string `json:"name"`
				Type     string `json:"type"`
				AllValue string `json:"allValue"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	subst := []string{"$__rate_interval", "1m", "$__interval", "15s", "$__range", "10m"}
	for _, v := range dash.Templating.List {
		if v.Type == "query" {
			require.NotEmpty(t, v.AllValue, "variable %s has an All value", v.Name)
			subst = append(subst, "${"+v.Name+"}", v.AllValue, "$"+v.Name, v.AllValue)
		}
	}
	r := strings.NewReplacer(subst...)
	var out []dashboardQuery
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, rp := range ps {
			var p panel
			require.NoError(t, json.Unmarshal(rp, &p))
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.Expr, "panel %q has a target without a query", p.Title)
				out = append(out, dashboardQuery{p.Title, r.Replace(tg.Expr)})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	require.NotEmpty(t, out)
	for _, q := range out {
		require.NotContains(t, q.expr, "$", "panel %q: a variable this test does not know: %s", q.panel, q.expr)
	}
	return out
}

// buildDemo builds examples/agent into the test's temporary directory.
func buildDemo(t *testing.T, root string) string {
	t.Helper()
	agent := filepath.Join(t.TempDir(), "agent")
	build := exec.Command("go", "build", "-o", agent, "./examples/agent")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the demo: %s", out)
	return agent
}

// startDemoServingMetrics runs the demo through outageScenarios round after
// round, its metrics served for Prometheus on a free port of 127.0.0.1, and
// returns the host:port it serves them on. When the test ends its stdin is
// closed, which ends it after its round; it must exit cleanly, every
// round's own checks passed (or it is killed, by its PID, if it does not
// exit within a minute).
func startDemoServingMetrics(t *testing.T, agent string) string {
	t.Helper()
	cmd := exec.Command(agent, "-scenario", strings.Join(outageScenarios, ","), "-repeat", "-quiet", "-time-scale", "0.001")
	cmd.Env = append(withoutOTel(os.Environ()), "OTEL_METRICS_EXPORTER=prometheus",
		"OTEL_EXPORTER_PROMETHEUS_HOST=127.0.0.1", "OTEL_EXPORTER_PROMETHEUS_PORT=0", "OTEL_SERVICE_NAME=retrace-e2e")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	cmd.Stdout = io.Discard
	require.NoError(t, cmd.Start())

	// stderr is read to its end: the first lines say where the metrics are,
	// the rest is kept for a failure's log.
	log := &syncBuffer{}
	addr := make(chan string, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stderr)
		served := regexp.MustCompile(`^agent: metrics for Prometheus at http://(127\.0\.0\.1:\d+)/metrics$`)
		for sc.Scan() {
			fmt.Fprintln(log, sc.Text())
			if m := served.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	exited := make(chan error, 1)
	go func() {
		<-read // Wait closes the pipe: read it to its end first
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case err := <-exited:
			assert.NoError(t, err, "the demo, stopped by closing its stdin, exits cleanly with every round's checks passed:\n%s", log.String())
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("the demo did not exit within a minute of its stdin closing:\n%s", log.String())
		}
	})
	select {
	case a := <-addr:
		return a
	case err := <-exited:
		exited <- err
		t.Fatalf("the demo exited before serving its metrics: %v\n%s", err, log.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("the demo did not say where its metrics are within 2 minutes:\n%s", log.String())
	}
	return ""
}

// promServer is a Prometheus this test started.
type promServer struct{ base string }

// startPrometheus runs Prometheus on a free port of 127.0.0.1, with its own
// storage in a temporary directory and exemplar storage on, scraping target
// every second as job retrace-agent and evaluating the alert rules every
// second; it is stopped, by its PID, when the test ends, its log printed if
// the test failed.
func startPrometheus(t *testing.T, bin, promtool, root, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: retrace-agent
    static_configs:
      - targets: [%q]
`, filepath.Join(root, alertRules), target)), 0o644))
	out, err := exec.Command(promtool, "check", "config", cfg).CombinedOutput()
	require.NoError(t, err, "promtool check config: %s", out)

	port := freePorts(t, 1)[0]
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:"+port, "--enable-feature=exemplar-storage", "--log.level=warn")
	exited, log := startLogged(t, "prometheus", cmd)
	p := &promServer{base: "http://127.0.0.1:" + port}
	p.await(t, "Prometheus to be ready", func() (bool, string) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("prometheus exited at start: %v\n%s", err, log.String())
		default:
		}
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return p
}

// api GETs path with query from Prometheus's HTTP API and decodes the
// answer's data into out.
func (p *promServer) api(path string, query url.Values, out any) error {
	u := p.base + path
	if query != nil {
		u += "?" + query.Encode()
	}
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, body.Error)
	}
	return json.Unmarshal(body.Data, out)
}

// await polls cond until it holds, for at most 4 minutes (the rules'
// warnings fire after holding for a minute, over windows that fill as the
// demo runs), failing with what cond last said.
func (p *promServer) await(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 4 minutes for %s; last: %s", what, last)
		}
		time.Sleep(250 * time.Millisecond) // polling a process we do not control
	}
}
