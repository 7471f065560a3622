// Command results writes bench/RESULTS.md: the micro-benchmarks' medians
// (from `go test -bench` output) with the benchstat table, the retry storm in
// virtual time, and the amplification of nested retry layers. It also writes
// the storm's series as CSV for the plot. scripts/bench.sh runs it.
//
// Every figure on the page is computed from the run the page names: the
// benchmark output and the benchstat summary it is given, and the storm and
// the amplification it simulates itself. The page says when it was generated
// and by which command, and which command wrote the benchmark output when it
// is told (-bench-cmd). Its prose (page.md.tmpl) holds no number of its own:
// a figure typed by hand would read as measured. The one hand-written part,
// notes.md, is labelled as such, dated, and holds no figures.
package main

import (
	"bufio"
	_ "embed"
	"encoding/csv"
	"flag"
	"fmt"
	"math"
	"os"
	"regexp"
	goruntime "runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/retrace-go/retrace/bench"
	"github.com/retrace-go/retrace/policies"
)

//go:embed page.md.tmpl
var pageTemplate string

// notes is the hand-written section that ends the page.
//
//go:embed notes.md
var notes string

// fleetRedis is the section of a run of its own (contrib/redis's, against
// a real redis-server, which this command does not start): it names that
// run, and its figures are that run's.
//
//go:embed fleet-redis.md
var fleetRedis string

// config is the command line.
type config struct {
	bench, benchstat, out, csv string
	fleetCSV                   string
	benchCmd                   string // the command that wrote the bench file, "" if not given
}

func main() {
	var c config
	flag.StringVar(&c.bench, "bench", "bench/out/bench.txt", "go test -bench output, with -count 10 or more")
	flag.StringVar(&c.benchstat, "benchstat", "bench/out/benchstat.txt", "benchstat's summary of the same file")
	flag.StringVar(&c.out, "out", "bench/RESULTS.md", "the results page")
	flag.StringVar(&c.csv, "csv", "bench/storm.csv", "the storm's series, for the plot")
	flag.StringVar(&c.fleetCSV, "fleet-csv", "bench/storm-fleet.csv", "the fleet storm's series, for its plot")
	flag.StringVar(&c.benchCmd, "bench-cmd", "", "the command that wrote the -bench file, stated on the page; without it the page says the command was not recorded")
	flag.Parse()
	if err := run(c, time.Now()); err != nil {
		fmt.Fprintln(os.Stderr, "results:", err)
		os.Exit(1)
	}
}

// command is the generator's command line with every flag's value, so
// that the page states exactly what produced it.
func (c config) command() string {
	args := []string{"go", "run", "./bench/cmd/results", "-bench", c.bench, "-benchstat", c.benchstat, "-out", c.out, "-csv", c.csv}
	if c.benchCmd != "" {
		args = append(args, "-bench-cmd", c.benchCmd)
	}
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return strings.Join(args, " ")
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:=@%+,-]+$`)

// shellQuote quotes s for a POSIX shell, if it needs quoting.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sample is one benchmark's runs. bytes and allocs hold only the runs that
// reported them (-benchmem or b.ReportAllocs): none when no run did.
type sample struct {
	ns, bytes, allocs []float64
}

// benchLine is a result line of go test -bench; the name's "-N" suffix is
// the GOMAXPROCS of the run (absent when it is 1).
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-(\d+))?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) B/op)?(?:\s+([\d.]+) allocs/op)?`)

// benchRun is what a go test -bench output holds.
type benchRun struct {
	samples map[string]*sample
	env     []string // its goos, goarch, pkg and cpu lines
	procs   []string // the GOMAXPROCS suffixes of its benchmark names
}

func parse(path string) (*benchRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := &benchRun{samples: map[string]*sample{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		for _, p := range []string{"goos:", "goarch:", "pkg:", "cpu:"} {
			if strings.HasPrefix(line, p) {
				r.env = append(r.env, line)
			}
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := r.samples[m[1]]
		if s == nil {
			s = &sample{}
			r.samples[m[1]] = s
		}
		if m[2] != "" {
			r.procs = append(r.procs, m[2])
		}
		s.ns = append(s.ns, num(m[3]))
		if m[4] != "" {
			s.bytes = append(s.bytes, num(m[4]))
		}
		if m[5] != "" {
			s.allocs = append(s.allocs, num(m[5]))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(r.samples) == 0 {
		return nil, fmt.Errorf("%s holds no benchmark results", path)
	}
	r.env, r.procs = dedupe(r.env), dedupe(r.procs)
	return r, nil
}

func num(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// memory formats the median of a sample's B/op or allocs/op, or "–" when
// no run reported them.
func memory(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", median(xs))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// The micro-benchmarks the tables show, in their order.
var (
	microBenchmarks = []string{"BenchmarkCall", "BenchmarkCallParallel"}
	// microPaths: the handler succeeds; fails with a provider's typed
	// error; fails with a plain error, classified by its text.
	microPaths = []string{"success", "failure", "failure-plain"}
	variants   = []string{"bare", "failsafe", "failsafe-otel", "failsafe-spans", "retrace-noop", "retrace-sdk", "retrace-unsampled"}

	// twoLayerBenchmarks are the benchmarks of two nested retry layers (a
	// typed error, a plain one), and twoLayerVariants their sub-benchmarks
	// in the order their tables show them (any other sub-benchmark the run
	// holds follows, by name).
	twoLayerBenchmarks = []string{"BenchmarkTwoLayers", "BenchmarkTwoLayersPlain"}
	twoLayerVariants   = []string{"failsafe", "failsafe-otel", "failsafe-spans", "retrace-noop", "retrace-sdk"}
)

// The targets the page checks. They are goals set beforehand, not
// measurements, and the page says so: each is a ratio of medians (sec/op)
// of two variants of one benchmark.
const (
	targetNoopRatio    = 1.00 // BenchmarkCall/success: retrace-noop at most this × failsafe
	targetCallSDKRatio = 1.10 // BenchmarkCall/success: retrace-sdk at most this × failsafe-otel
	// On every failure path (one layer and two, a typed error and a plain
	// one, one goroutine and parallel), retrace at most this × the same
	// work without it: the failure path is the one retrace exists for.
	targetFailureRatio = 1.00
	// On the success path and every failure path, retrace traced at most
	// this × the spans a careful user writes by hand (failsafe-spans): the
	// contract is that tracing costs no more than those.
	targetSpansRatio = 1.00

	targetPeakCut = 0.5 // the jitter cuts the storm's peak by at least this…
	targetClients = 100 // …with this many clients
)

// ratioGoal is a target: benchmark/a's median sec/op at most limit ×
// benchmark/b's.
type ratioGoal struct {
	benchmark, a, b string
	limit           float64
}

// text is the target as the page states it.
func (g ratioGoal) text() string {
	return fmt.Sprintf("`%s`: `%s` at most %.2f× `%s`, sec/op", g.benchmark, g.a, g.limit, g.b)
}

// goals are the ratio targets, in the page's order: the success path's,
// then, for every failure path, retrace without tracing against raw
// failsafe-go and retrace tracing against failsafe-go traced by hand, with
// listeners (failsafe-otel) and with the spans alone (failsafe-spans).
var goals = func() []ratioGoal {
	gs := []ratioGoal{
		{"BenchmarkCall/success", "retrace-noop", "failsafe", targetNoopRatio},
		{"BenchmarkCall/success", "retrace-sdk", "failsafe-otel", targetCallSDKRatio},
		{"BenchmarkCall/success", "retrace-sdk", "failsafe-spans", targetSpansRatio},
	}
	var failures []string
	for _, bn := range microBenchmarks {
		for _, path := range microPaths[1:] {
			failures = append(failures, bn+"/"+path)
		}
	}
	for _, bn := range append(failures, twoLayerBenchmarks...) {
		gs = append(gs, ratioGoal{bn, "retrace-noop", "failsafe", targetFailureRatio},
			ratioGoal{bn, "retrace-sdk", "failsafe-otel", targetFailureRatio},
			ratioGoal{bn, "retrace-sdk", "failsafe-spans", targetSpansRatio})
	}
	return gs
}()

// The storms the page reports, by number of clients.
var stormClients = []int{targetClients, 5}

// The fleet storms the page reports, by number of workers, the plotted one
// first.
var fleetClients = []int{1000, 100}

// page is everything the template prints.
type page struct {
	Generated string // when, in UTC
	Command   string // the generator's command line
	BenchFile string
	BenchCmd  string // "" when not given
	Benchstat string // the benchstat summary, verbatim
	Runs      string // how many runs each benchmark had: "10", or "3–10" when they differ
	Env       []string
	Procs     string // the benchmarks' GOMAXPROCS, from their names; "" if none
	GoVersion string // the generator's
	CPUs      int    // the generator's machine's
	Targets   []targetRow
	Micro     []microTable

	TwoLayers []microTable // a table per two-layer benchmark; no rows when it was not in the run

	Retry  retryFacts
	Storm  bench.StormConfig // DefaultStorm's settings, as the prose describes them
	Window string
	Storms []stormTable
	Spread stormSpread
	Fleet  bench.StormConfig // FleetStorm's settings
	Fleets []stormTable
	// The same fleets with their pauses jittered (FleetStormSpread), and
	// the range of the pauses' factor, as the prose states it.
	FleetSpread      bench.StormConfig
	FleetsSpread     []stormTable
	ThinkLo, ThinkHi string

	Amp    []bench.AmpRow
	Hidden *bench.AmpRow // the first setup whose provider got more requests than its trace saw calls

	FleetRedis string
	Notes      string
}

type targetRow struct{ Target, Measured, Holds string }

type microTable struct {
	Benchmark, Path string
	Rows            []microRow
}

type microRow struct {
	Variant                 string
	NsOp, Ratio, BOp, Alloc string
	// RatioSpans is ns/op over failsafe-spans', the spans made by hand.
	RatioSpans string
}

// retryFacts are the settings of policies.ToolRetry, which the storm's
// clients use, as the page states them.
type retryFacts struct {
	MaxAttempts        int
	Base, Cap          string
	JitterLo, JitterHi string
}

type stormTable struct {
	Clients, Capacity int
	Rows              []stormRow
}

type stormRow struct {
	Strategy           bench.Strategy
	Peak, Downstream   int
	PerLogical         string
	Succeeded, Logical int
	Finish             string
}

// stormSpread is what the prose after the storm tables says, for
// targetClients clients.
type stormSpread struct {
	Clients                             int
	PeakNoJitter, PeakJitter            int
	DownJitter, DownBudget, DownBreaker int
	OKJitter, OKBreaker, Logical        int
	LogicalJitter                       int
}

// seconds formats d in seconds, as short as it is exact: "0.8 s", "5 s".
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

// ratio formats a/b, or "–" when b was not measured.
func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// ratioText formats the ratio q with two decimals, or with as many more as
// it takes not to print it equal to limit when it is not: a ratio shown as
// the target itself always meets it.
func ratioText(q, limit float64) string {
	for prec := 2; ; prec++ {
		s := strconv.FormatFloat(q, 'f', prec, 64)
		if q == limit || prec == 9 || s != strconv.FormatFloat(limit, 'f', prec, 64) {
			return s
		}
	}
}

// perOp is a sample's median ns/op, and its median allocs/op when the run
// reported them: "36000 ns/op, 152 allocs/op".
func perOp(s *sample) string {
	out := fmt.Sprintf("%.0f ns/op", median(s.ns))
	if len(s.allocs) > 0 {
		out += fmt.Sprintf(", %.0f allocs/op", median(s.allocs))
	}
	return out
}

// ratioTarget checks the target that benchmark/a's median sec/op is at most
// limit × benchmark/b's. A benchmark the run does not hold is named as such,
// and the target is not measured.
func (r *benchRun) ratioTarget(target, benchmark, a, b string, limit float64) targetRow {
	sa, sb := r.samples[benchmark+"/"+a], r.samples[benchmark+"/"+b]
	var missing []string
	for _, v := range []struct {
		name string
		s    *sample
	}{{a, sa}, {b, sb}} {
		if v.s == nil {
			missing = append(missing, "`"+benchmark+"/"+v.name+"`")
		}
	}
	if !r.holdsBenchmark(benchmark) {
		missing = []string{"`" + benchmark + "`"}
	}
	switch len(missing) {
	case 1:
		return targetRow{Target: target, Measured: missing[0] + " was not in this run", Holds: "not measured"}
	case 2:
		return targetRow{Target: target, Measured: missing[0] + " and " + missing[1] + " were not in this run", Holds: "not measured"}
	}
	measured := fmt.Sprintf("`%s` %s vs `%s` %s", a, perOp(sa), b, perOp(sb))
	x, y := median(sa.ns), median(sb.ns)
	if y == 0 {
		return targetRow{Target: target, Measured: measured + ": no ratio", Holds: "not measured"}
	}
	q := x / y
	return targetRow{Target: target, Measured: fmt.Sprintf("%s: **%s×**", measured, ratioText(q, limit)), Holds: holds(q <= limit)}
}

// holdsBenchmark reports whether the run holds any sub-benchmark of
// benchmark.
func (r *benchRun) holdsBenchmark(benchmark string) bool {
	for name := range r.samples {
		if strings.HasPrefix(name, benchmark+"/") {
			return true
		}
	}
	return false
}

func holds(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func run(c config, now time.Time) error {
	br, err := parse(c.bench)
	if err != nil {
		return err
	}
	stat, err := os.ReadFile(c.benchstat)
	if err != nil {
		return err
	}
	storms := map[int]map[bench.Strategy]bench.StormResult{}
	for _, n := range stormClients {
		storms[n] = map[bench.Strategy]bench.StormResult{}
		for _, s := range bench.Strategies {
			storms[n][s] = simulate(bench.DefaultStorm(n, s))
		}
	}
	fleets := map[int]map[bench.Strategy]bench.StormResult{}
	for _, n := range fleetClients {
		fleets[n] = map[bench.Strategy]bench.StormResult{}
		for _, s := range bench.FleetStrategies {
			fleets[n][s] = simulate(bench.FleetStorm(n, s))
		}
	}
	p := build(c, now, br, string(stat), storms, bench.Amplification())
	p.Fleet = bench.FleetStorm(fleetClients[0], bench.SharedFleet)
	p.Fleets = tables(fleetClients, bench.FleetStrategies, fleets, bench.FleetStorm)
	spread := map[int]map[bench.Strategy]bench.StormResult{}
	for _, n := range fleetClients {
		spread[n] = map[bench.Strategy]bench.StormResult{}
		for _, s := range bench.FleetStrategies {
			spread[n][s] = simulate(bench.FleetStormSpread(n, s))
		}
	}
	p.FleetSpread = bench.FleetStormSpread(fleetClients[0], bench.SharedRateFleet)
	p.FleetsSpread = tables(fleetClients, bench.FleetStrategies, spread, bench.FleetStormSpread)
	p.ThinkLo, p.ThinkHi = thinkFactor(p.FleetSpread)

	tmpl, err := template.New("page").Funcs(template.FuncMap{"seconds": seconds}).Parse(pageTemplate)
	if err != nil {
		return err
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, p); err != nil {
		return err
	}
	page := "<!-- Generated by go run ./bench/cmd/results (scripts/bench.sh); do not edit: every figure comes from the run it names. -->\n" + b.String()
	if err := os.WriteFile(c.out, []byte(page), 0o644); err != nil {
		return err
	}
	if err := writeCSV(c.csv, stormClients, bench.Strategies, storms); err != nil {
		return err
	}
	if c.fleetCSV == "" {
		return nil
	}
	return writeCSV(c.fleetCSV, fleetClients, bench.FleetStrategies, fleets)
}

// thinkFactor is the range of a storm's pause factor, as the page prints it.
func thinkFactor(cfg bench.StormConfig) (lo, hi string) {
	return strconv.FormatFloat(1-cfg.ThinkJitter, 'f', -1, 64), strconv.FormatFloat(1+cfg.ThinkJitter, 'f', -1, 64)
}

// simulate runs a storm. A storm is deterministic for its config, so the
// tests, which generate the page many times, replace it with a memo.
var simulate = bench.Simulate

// tables are the storm tables of the given sizes and strategies.
func tables(sizes []int, strategies []bench.Strategy, storms map[int]map[bench.Strategy]bench.StormResult, cfg func(int, bench.Strategy) bench.StormConfig) []stormTable {
	var out []stormTable
	for _, n := range sizes {
		t := stormTable{Clients: n, Capacity: cfg(n, strategies[0]).Capacity}
		for _, s := range strategies {
			r := storms[n][s]
			t.Rows = append(t.Rows, stormRow{
				Strategy: s, Peak: r.Peak, Downstream: r.DownstreamCalls, PerLogical: fmt.Sprintf("%.2f", r.CallsPerLogical()),
				Succeeded: r.Succeeded, Logical: r.LogicalCalls, Finish: fmt.Sprintf("%.1f s", r.Finish.Seconds()),
			})
		}
		out = append(out, t)
	}
	return out
}

// build computes the page from the run.
func build(c config, now time.Time, br *benchRun, stat string, storms map[int]map[bench.Strategy]bench.StormResult, amp []bench.AmpRow) *page {
	p := &page{
		Generated:  now.UTC().Format("2006-01-02 15:04 UTC"),
		Command:    c.command(),
		BenchFile:  c.bench,
		BenchCmd:   c.benchCmd,
		Benchstat:  stat,
		Env:        br.env,
		Procs:      strings.Join(br.procs, ", "),
		GoVersion:  goruntime.Version(),
		CPUs:       goruntime.NumCPU(),
		Notes:      notes,
		FleetRedis: fleetRedis,
	}
	fewest, most := math.MaxInt, 0
	for _, s := range br.samples {
		fewest, most = min(fewest, len(s.ns)), max(most, len(s.ns))
	}
	p.Runs = strconv.Itoa(most)
	if fewest != most {
		p.Runs = fmt.Sprintf("%d–%d", fewest, most)
	}

	med := func(bench, path, v string) float64 {
		if s := br.samples[bench+"/"+path+"/"+v]; s != nil {
			return median(s.ns)
		}
		return 0
	}
	for _, g := range goals {
		p.Targets = append(p.Targets, br.ratioTarget(g.text(), g.benchmark, g.a, g.b, g.limit))
	}
	peakNo, peakJ := storms[targetClients][bench.NoJitter].Peak, storms[targetClients][bench.Jitter].Peak
	cut := 1 - float64(peakJ)/float64(peakNo)
	p.Targets = append(p.Targets, targetRow{
		Target:   fmt.Sprintf("`ToolRetry`'s jitter cuts the storm's peak by ≥ %g%% at %d clients", 100*targetPeakCut, targetClients),
		Measured: fmt.Sprintf("%d → %d requests per %s: **−%.0f%%**", peakNo, peakJ, window(), 100*cut),
		Holds:    holds(cut >= targetPeakCut),
	})

	for _, bn := range microBenchmarks {
		for _, path := range microPaths {
			t := microTable{Benchmark: bn, Path: path}
			base, spans := med(bn, path, "failsafe"), med(bn, path, "failsafe-spans")
			for _, v := range variants {
				s := br.samples[bn+"/"+path+"/"+v]
				if s == nil {
					continue
				}
				t.Rows = append(t.Rows, row(v, s, base, spans))
			}
			if len(t.Rows) > 0 {
				p.Micro = append(p.Micro, t)
			}
		}
	}

	for _, bn := range twoLayerBenchmarks {
		t := microTable{Benchmark: bn}
		base, spans := 0.0, 0.0
		if s := br.samples[bn+"/failsafe"]; s != nil {
			base = median(s.ns)
		}
		if s := br.samples[bn+"/failsafe-spans"]; s != nil {
			spans = median(s.ns)
		}
		for _, v := range subBenchmarks(br, bn, twoLayerVariants) {
			t.Rows = append(t.Rows, row(v, br.samples[bn+"/"+v], base, spans))
		}
		p.TwoLayers = append(p.TwoLayers, t)
	}

	tr := policies.ToolRetry
	p.Retry = retryFacts{
		MaxAttempts: tr.MaxAttempts, Base: seconds(tr.Backoff.Base), Cap: seconds(tr.Backoff.Cap),
		JitterLo: strconv.FormatFloat(1-tr.Backoff.Jitter, 'f', -1, 64), JitterHi: strconv.FormatFloat(1, 'f', -1, 64),
	}
	p.Storm = bench.DefaultStorm(targetClients, bench.NoJitter)
	p.Window = window()
	p.Storms = tables(stormClients, bench.Strategies, storms, bench.DefaultStorm)
	s := storms[targetClients]
	p.Spread = stormSpread{
		Clients: targetClients, PeakNoJitter: peakNo, PeakJitter: peakJ,
		DownJitter: s[bench.Jitter].DownstreamCalls, DownBudget: s[bench.JitterBudget].DownstreamCalls, DownBreaker: s[bench.JitterBreaker].DownstreamCalls,
		OKJitter: s[bench.Jitter].Succeeded, LogicalJitter: s[bench.Jitter].LogicalCalls,
		OKBreaker: s[bench.JitterBreaker].Succeeded, Logical: s[bench.JitterBreaker].LogicalCalls,
	}

	p.Amp = amp
	for i := range amp {
		if amp[i].Requests != amp[i].TraceCalls {
			p.Hidden = &amp[i]
			break
		}
	}
	return p
}

// row is a variant's line in a benchmark's table: its medians, and its
// ns/op over base, failsafe's, and over spans, failsafe-spans'.
func row(v string, s *sample, base, spans float64) microRow {
	return microRow{
		Variant: v, NsOp: fmt.Sprintf("%.0f", median(s.ns)), Ratio: ratio(median(s.ns), base),
		RatioSpans: ratio(median(s.ns), spans), BOp: memory(s.bytes), Alloc: memory(s.allocs),
	}
}

// subBenchmarks is the sub-benchmarks of benchmark that the run holds: those
// of known in that order, then any other by name.
func subBenchmarks(br *benchRun, benchmark string, known []string) []string {
	var out, other []string
	for _, v := range known {
		if br.samples[benchmark+"/"+v] != nil {
			out = append(out, v)
		}
	}
	for name := range br.samples {
		v, ok := strings.CutPrefix(name, benchmark+"/")
		if ok && !slices.Contains(known, v) {
			other = append(other, v)
		}
	}
	sort.Strings(other)
	return append(out, other...)
}

// window is the storm's window width: "100 ms".
func window() string { return strconv.FormatInt(bench.Window.Milliseconds(), 10) + " ms" }

func writeCSV(path string, sizes []int, strategies []bench.Strategy, storms map[int]map[bench.Strategy]bench.StormResult) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	// Line 1 says the file is generated; the plot reads past it (csv
	// Comment '#').
	if _, err := f.WriteString("# Generated by go run ./bench/cmd/results (scripts/bench.sh); do not edit.\n"); err != nil {
		_ = f.Close()
		return err
	}
	cw := csv.NewWriter(f)
	_ = cw.Write([]string{"clients", "strategy", "window_ms", "requests"})
	for _, n := range sizes {
		for _, s := range strategies {
			for i, x := range storms[n][s].Series {
				_ = cw.Write([]string{strconv.Itoa(n), string(s), strconv.Itoa(i * int(bench.Window/time.Millisecond)), strconv.Itoa(x)})
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
