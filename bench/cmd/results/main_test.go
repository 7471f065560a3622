package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/bench"
	"github.com/retrace-go/retrace/policies"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
// the median over failsafe's median. BenchmarkCallParallel/failure has no
// retrace-unsampled.
var wantTables = map[string][]string{
	"BenchmarkCall / success": {
		"| bare | 5 | 0.01 | 0 | 0 |",
		"| failsafe | 1000 | 1.00 | 736 | 21 |",
		"| failsafe-otel | 4000 | 4.00 | 3585 | 40 |",
		"| retrace-noop | 700 | 0.70 | 480 | 5 |",
		"| retrace-sdk | 4400 | 4.40 | 3857 | 14 |",
		"| retrace-unsampled | 900 | 0.90 | 576 | 6 |",
	},
	"BenchmarkCall / failure": {
		"| bare | 7 | 0.00 | 0 | 0 |",
		"| failsafe | 5000 | 1.00 | 736 | 21 |",
		"| failsafe-otel | 16000 | 3.20 | 3585 | 40 |",
		"| retrace-noop | 5200 | 1.04 | 480 | 5 |",
		"| retrace-sdk | 15200 | 3.04 | 3857 | 14 |",
		"| retrace-unsampled | 4800 | 0.96 | 576 | 6 |",
	},
	"BenchmarkCallParallel / success": {
		"| bare | 3 | 0.00 | 0 | 0 |",
		"| failsafe | 800 | 1.00 | 736 | 21 |",
		"| failsafe-otel | 3600 | 4.50 | 3585 | 40 |",
		"| retrace-noop | 560 | 0.70 | 480 | 5 |",
		"| retrace-sdk | 4000 | 5.00 | 3857 | 14 |",
		"| retrace-unsampled | 720 | 0.90 | 576 | 6 |",
	},
	"BenchmarkCallParallel / failure": {
		"| bare | 3 | 0.00 | 0 | 0 |",
		"| failsafe | 3600 | 1.00 | 736 | 21 |",
		"| failsafe-otel | 11000 | 3.06 | 3585 | 40 |",
		"| retrace-noop | 3420 | 0.95 | 480 | 5 |",
		"| retrace-sdk | 11700 | 3.25 | 3857 | 14 |",
	},
}

// wantTargets are the fixture's target rows; the thresholds are the goals
// main.go declares.
var wantTargets = []string{
	"| `retrace-noop` within 1.15× of `failsafe` ns/op, success path | 700 ns vs 1000 ns: **0.70×** | yes |",
	"| `retrace-sdk` no slower than `failsafe-otel`, success path | 4400 ns vs 4000 ns: **1.10×** | **no** |",
	"| (the same on the failure path) | 15200 ns vs 16000 ns: **0.95×** | yes |",
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
	for _, row := range wantTargets {
		assert.Contains(t, page, row+"\n")
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
	numbers(allowed, wantTargets...)
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
			r := bench.Simulate(bench.DefaultStorm(n, s))
			add(r.Peak, r.DownstreamCalls, fmt.Sprintf("%.2f", r.CallsPerLogical()), r.Succeeded, r.LogicalCalls, fmt.Sprintf("%.1f", r.Finish.Seconds()))
			if n == 100 {
				peaks[s] = r.Peak
			}
		}
	}
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
	assert.Equal(t, 3, strings.Count(page, "| not in this run | not measured |"), "the three micro-benchmark targets")
	assert.NotContains(t, page, "**BenchmarkCall / ")
	assert.Contains(t, page, "**BenchmarkCallParallel / success** (medians)")
	assert.NotContains(t, page, "**BenchmarkCallParallel / failure**")
	assert.Contains(t, page, "| retrace-noop | 560 | 0.70 | 480 | 5 |")
	assert.Contains(t, page, "- GOMAXPROCS 4\n")
	assert.Contains(t, page, "medians of 1 runs")
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
	assert.Equal(t, "clients,strategy,window_ms,requests", lines[0])
	want := 1
	for _, n := range []int{100, 5} {
		for _, s := range bench.Strategies {
			want += len(bench.Simulate(bench.DefaultStorm(n, s)).Series)
		}
	}
	assert.Len(t, lines, want)
	assert.Equal(t, "100,no jitter,0,"+strconv.Itoa(bench.Simulate(bench.DefaultStorm(100, bench.NoJitter)).Series[0]), lines[1])
}
