package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/bench"
	"github.com/retrace-go/retrace/policies"
)

func TestMain(m *testing.M) {
	// Every page generated here simulates the same storms: simulate each once.
	var mu sync.Mutex
	memo := map[bench.StormConfig]bench.StormResult{}
	simulate = func(cfg bench.StormConfig) bench.StormResult {
		mu.Lock()
		defer mu.Unlock()
		r, ok := memo[cfg]
		if !ok {
			r = bench.Simulate(cfg)
			memo[cfg] = r
		}
		return r
	}
	goleak.VerifyTestMain(m)
}

// generatedAt is when the tests' pages are generated: a date found nowhere
// else, so that the page can only have it from the generator's clock.
var generatedAt = time.Date(2027, 2, 3, 4, 5, 6, 0, time.UTC)

// numberPattern finds the numbers in a text: "12", "0.70", "1.26.8".
var numberPattern = regexp.MustCompile(`\d+(?:\.\d+)*`)

// numbers adds the numbers in each text to set.
func numbers(set map[string]bool, texts ...string) {
	for _, t := range texts {
		for _, n := range numberPattern.FindAllString(t, -1) {
			set[n] = true
		}
	}
}

// generate runs the generator on the fixture (or on bench, if not empty)
// and returns the page and its config.
func generate(t *testing.T, benchCmd, benchOut string) (string, config) {
	t.Helper()
	dir := t.TempDir()
	c := config{
		bench: filepath.Join("testdata", "bench.txt"), benchstat: filepath.Join("testdata", "benchstat.txt"),
		out: filepath.Join(dir, "RESULTS.md"), csv: filepath.Join(dir, "storm.csv"), benchCmd: benchCmd,
	}
	if benchOut != "" {
		c.bench = filepath.Join(dir, "bench.txt")
		require.NoError(t, os.WriteFile(c.bench, []byte(benchOut), 0o644))
	}
	require.NoError(t, run(c, generatedAt))
	out, err := os.ReadFile(c.out)
	require.NoError(t, err)
	return string(out), c
}

// The fixture's tables, worked out by hand from testdata/bench.txt: three
// runs of each benchmark, whose medians are its middle runs; × failsafe is
// the median over failsafe's median, × failsafe-spans over failsafe-spans'.
// BenchmarkCallParallel/failure has no retrace-unsampled.
var wantTables = map[string][]string{
	"BenchmarkCall / success": {
		"| bare | 5 | 0.01 | 0.00 | 0 | 0 |",
		"| failsafe | 1000 | 1.00 | 0.25 | 736 | 21 |",
		"| failsafe-otel | 4000 | 4.00 | 1.00 | 3585 | 40 |",
		"| failsafe-spans | 4000 | 4.00 | 1.00 | 3033 | 33 |",
		"| retrace-noop | 700 | 0.70 | 0.17 | 480 | 5 |",
		"| retrace-sdk | 4400 | 4.40 | 1.10 | 3857 | 14 |",
		"| retrace-unsampled | 900 | 0.90 | 0.23 | 576 | 6 |",
	},
	"BenchmarkCall / failure": {
		"| bare | 7 | 0.00 | 0.00 | 0 | 0 |",
		"| failsafe | 5000 | 1.00 | 0.31 | 736 | 21 |",
		"| failsafe-otel | 16000 | 3.20 | 1.00 | 3585 | 40 |",
		"| failsafe-spans | 16000 | 3.20 | 1.00 | 3033 | 33 |",
		"| retrace-noop | 5200 | 1.04 | 0.33 | 480 | 5 |",
		"| retrace-sdk | 15200 | 3.04 | 0.95 | 3857 | 14 |",
		"| retrace-unsampled | 4800 | 0.96 | 0.30 | 576 | 6 |",
	},
	"BenchmarkCallParallel / success": {
		"| bare | 3 | 0.00 | 0.00 | 0 | 0 |",
		"| failsafe | 800 | 1.00 | 0.23 | 736 | 21 |",
		"| failsafe-otel | 3600 | 4.50 | 1.03 | 3585 | 40 |",
		"| failsafe-spans | 3500 | 4.38 | 1.00 | 3033 | 33 |",
		"| retrace-noop | 560 | 0.70 | 0.16 | 480 | 5 |",
		"| retrace-sdk | 4000 | 5.00 | 1.14 | 3857 | 14 |",
		"| retrace-unsampled | 720 | 0.90 | 0.21 | 576 | 6 |",
	},
	"BenchmarkCallParallel / failure": {
		"| bare | 3 | 0.00 | 0.00 | 0 | 0 |",
		"| failsafe | 3600 | 1.00 | 0.28 | 736 | 21 |",
		"| failsafe-otel | 11000 | 3.06 | 0.85 | 3585 | 40 |",
		"| failsafe-spans | 13000 | 3.61 | 1.00 | 3033 | 33 |",
		"| retrace-noop | 3420 | 0.95 | 0.26 | 480 | 5 |",
		"| retrace-sdk | 11700 | 3.25 | 0.90 | 3857 | 14 |",
	},
	"BenchmarkTwoLayers": {
		"| failsafe | 36000 | 1.00 | 0.45 | 9480 | 152 |",
		"| failsafe-otel | 80000 | 2.22 | 1.00 | 38600 | 406 |",
		"| failsafe-spans | 80000 | 2.22 | 1.00 | 35466 | 386 |",
		"| retrace-noop | 12000 | 0.33 | 0.15 | 6596 | 43 |",
		"| retrace-sdk | 96000 | 2.67 | 1.20 | 34976 | 211 |",
	},
}

// runMedian is a benchmark's medians in a go test -bench output.
type runMedian struct {
	ns, allocs float64
	hasAllocs  bool
}

// runMedians works out the medians of a go test -bench output by name,
// without its "-N" suffix, independently of the generator's parser.
func runMedians(t *testing.T, out string) map[string]runMedian {
	t.Helper()
	ns, allocs := map[string][]float64{}, map[string][]float64{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := regexp.MustCompile(`-\d+$`).ReplaceAllString(f[0], "")
		for i := 1; i < len(f); i++ {
			v, err := strconv.ParseFloat(f[i-1], 64)
			switch f[i] {
			case "ns/op":
				require.NoError(t, err, l)
				ns[name] = append(ns[name], v)
			case "allocs/op":
				require.NoError(t, err, l)
				allocs[name] = append(allocs[name], v)
			}
		}
	}
	mid := func(xs []float64) float64 {
		sort.Float64s(xs)
		if len(xs)%2 == 1 {
			return xs[len(xs)/2]
		}
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	m := map[string]runMedian{}
	for name, xs := range ns {
		r := runMedian{ns: mid(xs)}
		if a := allocs[name]; len(a) > 0 {
			r.allocs, r.hasAllocs = mid(a), true
		}
		m[name] = r
	}
	return m
}

// fixtureVerdicts are the verdicts of the targets (main.go's goals, in
// order) on testdata/bench.txt, worked out by hand from its medians; ""
// for one whose benchmark the fixture does not hold (the plain-error paths).
var fixtureVerdicts = []string{
	"yes", "yes", "**no**", // success: noop 700/1000, sdk 4400/4000 (the target itself), sdk 4400/4000 (spans)
	"**no**", "yes", "yes", // failure: noop 5200/5000, sdk 15200/16000, sdk 15200/16000 (spans)
	"", "", "", // failure-plain
	"yes", "**no**", "yes", // parallel failure: noop 3420/3600, sdk 11700/11000, sdk 11700/13000 (spans)
	"", "", "",
	"yes", "**no**", "**no**", // two layers: noop 12000/36000, sdk 96000/80000, sdk 96000/80000 (spans)
	"", "", "",
}

// goal returns main.go's first goal on benchmark for variant a.
func goal(t *testing.T, benchmark, a string) ratioGoal {
	t.Helper()
	for _, g := range goals {
		if g.benchmark == benchmark && g.a == a {
			return g
		}
	}
	t.Fatalf("no goal for %s/%s", benchmark, a)
	return ratioGoal{}
}

// spansGoal returns main.go's goal on benchmark for retrace-sdk against the
// lean hand-made spans.
func spansGoal(t *testing.T, benchmark string) ratioGoal {
	t.Helper()
	for _, g := range goals {
		if g.benchmark == benchmark && g.a == "retrace-sdk" && g.b == "failsafe-spans" {
			return g
		}
	}
	t.Fatalf("no goal for %s/retrace-sdk against failsafe-spans", benchmark)
	return ratioGoal{}
}

// wantRatioTarget is g's row for the bench output out, computed from its
// medians: the ratio, and the verdict that follows from it. It shows the
// ratio with two decimals, so it fails on a ratio that two decimals would
// show equal to the target without being it (TestTargetVerdicts has those).
func wantRatioTarget(t *testing.T, out string, g ratioGoal) (row, verdict string) {
	t.Helper()
	m := runMedians(t, out)
	x, okA := m[g.benchmark+"/"+g.a]
	y, okB := m[g.benchmark+"/"+g.b]
	require.True(t, okA && okB, "%s/%s or %s not in the output", g.benchmark, g.a, g.b)
	q := x.ns / y.ns
	shown := fmt.Sprintf("%.2f", q)
	require.True(t, q == g.limit || shown != fmt.Sprintf("%.2f", g.limit), "%s rounds to the target %g", shown, g.limit)
	verdict = "**no**"
	if q <= g.limit {
		verdict = "yes"
	}
	side := func(v string, r runMedian) string {
		s := fmt.Sprintf("`%s` %.0f ns/op", v, r.ns)
		if r.hasAllocs {
			s += fmt.Sprintf(", %.0f allocs/op", r.allocs)
		}
		return s
	}
	return fmt.Sprintf("| %s | %s vs %s: **%s×** | %s |", g.text(), side(g.a, x), side(g.b, y), shown, verdict), verdict
}

// fixture is testdata/bench.txt.
func fixture(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "bench.txt"))
	require.NoError(t, err)
	return string(data)
}

// section returns the part of page from the line starting with heading to
// the next heading of the same level, or "" if there is none.
func section(page, heading string) string {
	i := strings.Index(page, "\n"+heading)
	if i < 0 {
		return ""
	}
	rest := page[i+1:]
	if j := strings.Index(rest[len(heading):], "\n## "); j >= 0 {
		return rest[:len(heading)+j+1]
	}
	return rest
}

func TestPageTables(t *testing.T) {
	page, _ := generate(t, "", "")
	for table, rows := range wantTables {
		body := section(page, "**"+table+"**")
		require.NotEmpty(t, body, "no table %s", table)
		body, _, _ = strings.Cut(body[len(table)+4:], "\n**") // up to the next table
		var got []string
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| variant") {
				got = append(got, l)
			}
		}
		assert.Equal(t, rows, got, table)
	}
	// The ratio targets, computed here from the fixture's medians.
	require.Len(t, goals, len(fixtureVerdicts))
	for i, g := range goals {
		if fixtureVerdicts[i] == "" {
			assert.Contains(t, page, "| "+g.text()+" | `"+g.benchmark+"` was not in this run | not measured |\n")
			continue
		}
		row, verdict := wantRatioTarget(t, fixture(t), g)
		assert.Contains(t, page, row+"\n")
		assert.Equal(t, fixtureVerdicts[i], verdict, g.text())
	}
	assert.Contains(t, page, "medians of 3 runs")
	assert.Contains(t, page, "- GOMAXPROCS 2\n", "from the names' -2 suffix")
	assert.Contains(t, page, "- cpu: Fixture CPU @ 1.00GHz\n")

	stat, err := os.ReadFile(filepath.Join("testdata", "benchstat.txt"))
	require.NoError(t, err)
	assert.Contains(t, page, "```\n"+string(stat)+"```\n", "the benchstat summary, verbatim")
}

// Every number on the page is accounted for by the run: it is in the
// benchmark output or the benchstat summary, worked out by hand from them
// (the tables above), a result or a setting of the storm and amplification
// simulations, the generation date, the command line, the generator's Go
// version and CPUs, or one of the declared targets. A number typed into the
// page by hand is none of these.
func TestPageFiguresComeFromTheRun(t *testing.T) {
	page, c := generate(t, "", "")
	allowed := map[string]bool{}
	for _, f := range []string{c.bench, c.benchstat} {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		numbers(allowed, string(data))
	}
	for _, rows := range wantTables {
		numbers(allowed, rows...)
	}
	for i, g := range goals {
		numbers(allowed, fmt.Sprintf("%.2f", g.limit))
		if fixtureVerdicts[i] != "" {
			row, _ := wantRatioTarget(t, fixture(t), g)
			numbers(allowed, row)
		}
	}
	numbers(allowed, generatedAt.Format("2006-01-02 15:04"), c.command(), goruntime.Version(), strconv.Itoa(goruntime.NumCPU()))

	// The storm's and amplification's results and settings, from the bench
	// package itself.
	add := func(xs ...any) {
		for _, x := range xs {
			numbers(allowed, fmt.Sprint(x))
		}
	}
	peaks := map[bench.Strategy]int{}
	for _, n := range []int{100, 5} {
		cfg := bench.DefaultStorm(n, bench.NoJitter)
		add(n, cfg.Capacity, cfg.CallsPerClient, cfg.Outage.Seconds(), cfg.Seed)
		for _, s := range bench.Strategies {
			r := simulate(bench.DefaultStorm(n, s))
			add(r.Peak, r.DownstreamCalls, fmt.Sprintf("%.2f", r.CallsPerLogical()), r.Succeeded, r.LogicalCalls, fmt.Sprintf("%.1f", r.Finish.Seconds()))
			if n == 100 {
				peaks[s] = r.Peak
			}
		}
	}
	for _, n := range []int{1000, 100} {
		cfg := bench.FleetStorm(n, bench.SharedFleet)
		add(n, cfg.Capacity, cfg.CallsPerClient, cfg.Outage.Seconds(), cfg.Think.Seconds(), cfg.Seed)
		for _, s := range bench.FleetStrategies {
			r := simulate(bench.FleetStorm(n, s))
			add(r.Peak, r.DownstreamCalls, fmt.Sprintf("%.2f", r.CallsPerLogical()), r.Succeeded, r.LogicalCalls, fmt.Sprintf("%.1f", r.Finish.Seconds()))
		}
	}
	spread := bench.FleetStormSpread(1000, bench.SharedRateFleet)
	add(spread.Seed, spread.Think.Seconds())
	add(thinkFactor(spread))
	for _, n := range []int{1000, 100} {
		for _, s := range bench.FleetStrategies {
			r := simulate(bench.FleetStormSpread(n, s))
			add(r.Peak, r.DownstreamCalls, fmt.Sprintf("%.2f", r.CallsPerLogical()), r.Succeeded, r.LogicalCalls, fmt.Sprintf("%.1f", r.Finish.Seconds()))
		}
	}
	rate := bench.RateBreaker(policies.BreakerConfig{}) // the rate strategy's settings, in its name
	add(rate.FailureRate*100, rate.MinimumCalls, rate.Window.Seconds())
	add(fmt.Sprintf("%.0f", 100*(1-float64(peaks[bench.Jitter])/float64(peaks[bench.NoJitter]))), 50) // the cut, and its target
	add(bench.Window.Milliseconds())
	tr := policies.ToolRetry
	add(tr.MaxAttempts, tr.Backoff.Base.Seconds(), tr.Backoff.Cap.Seconds(), 1-tr.Backoff.Jitter, 1)
	for _, r := range bench.Amplification() {
		add(r.Setup, r.Requests, r.TraceCalls, r.WorstCase)
	}

	// The hand-written notes hold no number but their date, which
	// TestPageHandWrittenNotes checks.
	notes := section(page, "## Notes (hand-written")
	require.NotEmpty(t, notes)
	page = strings.TrimSuffix(page, notes)
	// The Redis section's figures are its own run's, which it names.
	redis := section(page, "## A fleet's shared state on Redis")
	require.NotEmpty(t, redis)
	page = strings.TrimSuffix(page, redis)

	var stray []string
	for _, line := range strings.Split(page, "\n") {
		for _, n := range numberPattern.FindAllString(line, -1) {
			if !allowed[n] {
				stray = append(stray, fmt.Sprintf("%s in %q", n, line))
			}
		}
	}
	assert.Empty(t, stray, "numbers on the page that the run does not account for")
}

// The page says when it was generated and by which command; and which
// command wrote the benchmark output, or that it was not told.
func TestPageStatesItsRun(t *testing.T) {
	page, c := generate(t, "", "")
	first, rest, _ := strings.Cut(page, "\n")
	assert.Contains(t, first, "Generated by go run ./bench/cmd/results", "line 1 says the page is generated")
	page = rest
	assert.True(t, strings.HasPrefix(page, "# retrace: what a retry costs\n\nGenerated on 2027-02-03 04:05 UTC by\n\n```sh\n"+c.command()+"\n```\n"), page[:min(len(page), 400)])
	assert.Equal(t, "go run ./bench/cmd/results -bench testdata/bench.txt -benchstat testdata/benchstat.txt -out "+c.out+" -csv "+c.csv, c.command())
	assert.Contains(t, page, "The benchmark output was written by a command the generator was not told (`-bench-cmd`): it holds 3 runs of each benchmark.")

	const cmd = `go test -run '^$' -bench 'BenchmarkCall' -count 3 ./bench`
	page, c = generate(t, cmd, "")
	assert.Contains(t, c.command(), ` -bench-cmd 'go test -run '\''^$'\'' -bench '\''BenchmarkCall'\'' -count 3 ./bench'`, "quoted for a shell")
	assert.Contains(t, page, "```sh\n"+c.command()+"\n```\n")
	assert.Contains(t, page, "The benchmark output was written by\n\n```sh\n"+cmd+"\n```\n")
	assert.NotContains(t, page, "not told")
}

// The one hand-written section is labelled as such, dated, last, and holds
// no number but its date.
func TestPageHandWrittenNotes(t *testing.T) {
	page, _ := generate(t, "", "")
	var headings []string
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, "#") && strings.Contains(l, "hand-written") {
			headings = append(headings, l)
		}
	}
	assert.Equal(t, []string{"## Notes (hand-written, not computed from this run)"}, headings, "one hand-written section")
	notes := section(page, "## Notes (hand-written, not computed from this run)")
	require.NotEmpty(t, notes)
	assert.True(t, strings.HasSuffix(page, notes), "the notes end the page")
	date := regexp.MustCompile(`Written on (\d{4}-\d{2}-\d{2})`).FindStringSubmatch(notes)
	require.NotNil(t, date, "the notes say when they were written")
	_, err := time.Parse("2006-01-02", date[1])
	require.NoError(t, err)
	assert.Equal(t, numberPattern.FindAllString(date[1], -1), numberPattern.FindAllString(notes, -1), "no figure in the notes")
}

// The template holds no number of its own: every number on the page comes
// from the data the generator computes.
func TestTemplateHoldsNoNumbers(t *testing.T) {
	text := regexp.MustCompile(`(?s)\{\{.*?\}\}`).ReplaceAllString(pageTemplate, "")
	assert.Empty(t, numberPattern.FindAllString(text, -1), "numbers typed into page.md.tmpl")
}

// A run without BenchmarkCall says its targets were not measured rather than
// printing figures for benchmarks it does not hold.
func TestPageWithoutSomeBenchmarks(t *testing.T) {
	out := "goos: linux\n" +
		"BenchmarkCallParallel/success/failsafe-4   1000   800 ns/op   736 B/op   21 allocs/op\n" +
		"BenchmarkCallParallel/success/retrace-noop-4   1000   560 ns/op   480 B/op   5 allocs/op\n"
	page, _ := generate(t, "", out)
	assert.NotContains(t, page, "**BenchmarkCall / ")
	assert.Contains(t, page, "**BenchmarkCallParallel / success** (medians)")
	assert.NotContains(t, page, "**BenchmarkCallParallel / failure**")
	assert.Contains(t, page, "| retrace-noop | 560 | 0.70 | – | 480 | 5 |")
	assert.Contains(t, page, "- GOMAXPROCS 4\n")
	assert.Contains(t, page, "medians of 1 runs")

	// Neither BenchmarkCall nor the two layers: their ratio targets and
	// the two layers' tables say they were not in the run, and so do the
	// parallel failure paths'.
	for _, bn := range []string{"BenchmarkCall/success", "BenchmarkCall/failure", "BenchmarkCall/failure-plain",
		"BenchmarkCallParallel/failure", "BenchmarkCallParallel/failure-plain", "BenchmarkTwoLayers", "BenchmarkTwoLayersPlain"} {
		assert.Equal(t, 3, strings.Count(page, "| `"+bn+"` was not in this run | not measured |"), bn)
	}
	for _, bn := range twoLayerBenchmarks {
		assert.Contains(t, section(page, "## Two nested retry layers"), "\n`"+bn+"` was not in this run.\n")
		assert.NotContains(t, page, "**"+bn+"** (medians)")
	}
}

// A run that holds some of BenchmarkTwoLayers, without -benchmem: the table
// has what the run holds, with no memory figures; a target names the
// sub-benchmarks it lacks.
func TestPageWithSomeOfTwoLayers(t *testing.T) {
	out := "goos: linux\n" +
		"BenchmarkTwoLayers/failsafe-4   1000   36000 ns/op\n" +
		"BenchmarkTwoLayers/retrace-noop-4   1000   12000 ns/op\n"
	page, _ := generate(t, "", out)
	two := section(page, "## Two nested retry layers")
	assert.Contains(t, two, "| failsafe | 36000 | 1.00 | – | – | – |\n| retrace-noop | 12000 | 0.33 | – | – | – |\n")
	assert.NotContains(t, two, "`BenchmarkTwoLayers` was not in this run")
	row, verdict := wantRatioTarget(t, out, goal(t, "BenchmarkTwoLayers", "retrace-noop"))
	assert.Contains(t, page, row+"\n", "no allocs/op when the run did not report them")
	assert.Equal(t, "yes", verdict)
	assert.Contains(t, page, "| `BenchmarkTwoLayers/retrace-sdk` and `BenchmarkTwoLayers/failsafe-otel` were not in this run | not measured |\n")
}

// The verdict follows the ratio of the medians, the boundary included; a
// ratio that two decimals would show as the target while missing (or
// meeting) it by less is shown with the decimals that tell them apart.
func TestTargetVerdicts(t *testing.T) {
	sdkCall, noopCall := goal(t, "BenchmarkCall/success", "retrace-sdk"), goal(t, "BenchmarkCall/success", "retrace-noop")
	spansCall := spansGoal(t, "BenchmarkCall/success")
	noopFailure := goal(t, "BenchmarkTwoLayersPlain", "retrace-noop")
	tests := []struct {
		goal         ratioGoal
		a, b         float64 // the runs' ns/op: a's runs, then b's, one each
		shown, holds string
	}{
		{sdkCall, 4400, 4000, "1.10", "yes"},
		{sdkCall, 4480, 4000, "1.12", "**no**"},
		{sdkCall, 4360, 4000, "1.09", "yes"},
		{noopFailure, 10000, 10000, "1.00", "yes"},
		{noopFailure, 10040, 10000, "1.004", "**no**"},
		{noopFailure, 9990, 10000, "0.999", "yes"},
		{noopFailure, 12000, 10000, "1.20", "**no**"},
		{noopCall, 10000, 10000, "1.00", "yes"},
		{noopCall, 10010, 10000, "1.001", "**no**"},
		{noopCall, 11500, 10000, "1.15", "**no**"},
		{noopCall, 9000, 10000, "0.90", "yes"},
		{spansCall, 4000, 4000, "1.00", "yes"},
		{spansCall, 4004, 4000, "1.001", "**no**"},
		{spansCall, 3800, 4000, "0.95", "yes"},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%s/%s=%g/%s=%g", tt.goal.benchmark, tt.goal.a, tt.a, tt.goal.b, tt.b)
		t.Run(name, func(t *testing.T) {
			bench, a, b := tt.goal.benchmark, tt.goal.a, tt.goal.b
			out := fmt.Sprintf("%s/%s-2\t1000\t%g ns/op\t100 B/op\t7 allocs/op\n%s/%s-2\t1000\t%g ns/op\t200 B/op\t9 allocs/op\n",
				bench, a, tt.a, bench, b, tt.b)
			page, _ := generate(t, "", out)

			// The verdict is the one the numbers give.
			q := tt.a / tt.b
			want := "**no**"
			if q <= tt.goal.limit {
				want = "yes"
			}
			require.Equal(t, want, tt.holds, "the case's verdict")
			// The ratio shown is q, rounded.
			shown, err := strconv.ParseFloat(tt.shown, 64)
			require.NoError(t, err)
			assert.InDelta(t, q, shown, 0.5*math.Pow(10, -float64(len(tt.shown)-strings.Index(tt.shown, ".")-1)))

			row := fmt.Sprintf("| %s | `%s` %g ns/op, 7 allocs/op vs `%s` %g ns/op, 9 allocs/op: **%s×** | %s |\n", tt.goal.text(), a, tt.a, b, tt.b, tt.shown, tt.holds)
			assert.Contains(t, page, row)
		})
	}
}

func TestNoBenchmarks(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "bench.txt")
	require.NoError(t, os.WriteFile(empty, []byte("PASS\n"), 0o644))
	err := run(config{bench: empty, benchstat: filepath.Join("testdata", "benchstat.txt"), out: filepath.Join(dir, "R.md"), csv: filepath.Join(dir, "s.csv")}, generatedAt)
	assert.ErrorContains(t, err, "holds no benchmark results")
	_, statErr := os.Stat(filepath.Join(dir, "R.md"))
	assert.ErrorIs(t, statErr, os.ErrNotExist, "no page without figures")
}

// The CSV holds the storm series of both client counts, as the plot reads
// them.
func TestStormCSV(t *testing.T) {
	_, c := generate(t, "", "")
	data, err := os.ReadFile(c.csv)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	assert.True(t, strings.HasPrefix(lines[0], "# Generated by"), "line 1 says the file is generated")
	lines = lines[1:]
	assert.Equal(t, "clients,strategy,window_ms,requests", lines[0])
	want := 1
	for _, n := range []int{100, 5} {
		for _, s := range bench.Strategies {
			want += len(simulate(bench.DefaultStorm(n, s)).Series)
		}
	}
	assert.Len(t, lines, want)
	assert.Equal(t, "100,no jitter,0,"+strconv.Itoa(simulate(bench.DefaultStorm(100, bench.NoJitter)).Series[0]), lines[1])
}

// The fleet's table and its CSV hold every fleet strategy, at every size,
// with the figures the simulation gives.
func TestFleetTableAndCSVHoldEveryStrategy(t *testing.T) {
	dir := t.TempDir()
	c := config{
		bench: filepath.Join("testdata", "bench.txt"), benchstat: filepath.Join("testdata", "benchstat.txt"),
		out: filepath.Join(dir, "RESULTS.md"), csv: filepath.Join(dir, "storm.csv"), fleetCSV: filepath.Join(dir, "storm-fleet.csv"),
	}
	require.NoError(t, run(c, generatedAt))
	page, err := os.ReadFile(c.out)
	require.NoError(t, err)
	fleet := section(string(page), "## A fleet's storm")
	require.NotEmpty(t, fleet)
	csvText, err := os.ReadFile(c.fleetCSV)
	require.NoError(t, err)
	require.Len(t, bench.FleetStrategies, 3)
	for _, n := range fleetClients {
		for _, s := range bench.FleetStrategies {
			r := simulate(bench.FleetStorm(n, s))
			assert.Contains(t, fleet, fmt.Sprintf("| %s | %d | %d | %.2f | %d / %d |", s, r.Peak, r.DownstreamCalls, r.CallsPerLogical(), r.Succeeded, r.LogicalCalls))
			rows := 0
			for _, line := range strings.Split(string(csvText), "\n") {
				if strings.HasPrefix(line, strconv.Itoa(n)+","+string(s)+",") || strings.HasPrefix(line, strconv.Itoa(n)+",\""+string(s)+"\",") {
					rows++
				}
			}
			assert.Equal(t, len(r.Series), rows, "%d workers, %s: one CSV row per window", n, s)
			q := simulate(bench.FleetStormSpread(n, s))
			assert.Contains(t, fleet, fmt.Sprintf("| %s | %d | %d | %.2f | %d / %d |", s, q.Peak, q.DownstreamCalls, q.CallsPerLogical(), q.Succeeded, q.LogicalCalls), "pauses jittered")
		}
	}
}
