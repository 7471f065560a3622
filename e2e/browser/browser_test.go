package browser

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// browserWait bounds the whole conversation with the browser: a deadline
// that ends a hung browser, never a measure of speed (on a busy 2-core
// machine Chromium takes seconds to start).
const browserWait = 3 * time.Minute

// scenarios are the demo's scenarios whose traces the page draws: the
// always-503 waterfall (12 calls, 11 backoffs), and a Retry-After one.
var scenarios = []string{"always-503", "rate-limited"}

// expected is what a trace says about itself, read from the OTLP JSON
// without retrace explain: its spans, and its counts by retracetest's rule.
type expected struct {
	spans    int
	backoffs int // attempt spans that waited before they started (retrace.retry.delay_ms)
	counts   retracetest.Counts
}

// TestWaterfallInChromium builds the demo and retrace, writes the demo's
// traces as OTLP JSON, has explain -html draw them, and loads the page
// from disk in headless Chromium: one row per span of each trace, the
// header's counts the trace's own, a click and a key open a row's
// attributes, the time toggle switches the lanes, nothing is fetched, and
// the screenshot is not blank.
func TestWaterfallInChromium(t *testing.T) {
	chromium := findChromium(t)
	dir := t.TempDir()
	agent, retrace := goBuild(t, dir, "./examples/agent"), goBuild(t, dir, "./cmd/retrace")

	var traces bytes.Buffer
	for _, sc := range scenarios {
		file := filepath.Join(dir, sc+".json")
		out, err := exec.Command(agent, "-scenario", sc, "-time-scale", "0.001", "-quiet", "-otlp-file", file).CombinedOutput()
		require.NoError(t, err, "the demo, %s: %s", sc, out)
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		traces.Write(b)
	}
	input := filepath.Join(dir, "traces.json")
	require.NoError(t, os.WriteFile(input, traces.Bytes(), 0o600))
	order, want := readTraces(t, input)
	require.Len(t, order, len(scenarios), "one trace per scenario")

	page := filepath.Join(dir, "waterfall.html")
	out, err := exec.Command(retrace, "explain", "-otlp-file", input, "-html", page).CombinedOutput()
	require.NoError(t, err, "explain -html: %s", out)
	info, err := os.Stat(page)
	require.NoError(t, err)
	t.Logf("page: %s, %d bytes", page, info.Size())

	ctx, cancel := browser(t, chromium)
	defer cancel()
	requests := watchRequests(t, ctx)
	pageURL := "file://" + page
	do(t, ctx, chromedp.Navigate(pageURL), chromedp.WaitVisible(chromedp.CSS(`section.trace`)))

	for i, id := range order {
		w := want[id]
		sec := fmt.Sprintf(`section.trace[data-trace=%q]`, id)
		rows := evalInt(t, ctx, fmt.Sprintf(`document.querySelectorAll(%q).length`, sec+` .row[data-span]`))
		assert.Equal(t, w.spans, rows, "trace %s: one row per span", id)
		distinct := evalInt(t, ctx, fmt.Sprintf(`new Set(Array.from(document.querySelectorAll(%q), r => r.dataset.span)).size`, sec+` .row[data-span]`))
		assert.Equal(t, w.spans, distinct, "trace %s: each span's row once", id)
		header := map[string]string{}
		for _, k := range []string{"calls", "leaf-spans", "worst-case"} {
			header[k] = text(t, ctx, sec+fmt.Sprintf(` [data-count=%q]`, k))
		}
		assert.Equal(t, map[string]string{
			"calls":      strconv.FormatInt(w.counts.Calls, 10),
			"leaf-spans": strconv.Itoa(w.counts.LeafSpans),
			"worst-case": strconv.FormatInt(w.counts.WorstCase, 10),
		}, header, "trace %s: the header's counts", id)
		t.Logf("trace %d %s: %d rows for %d spans; header retrace.calls=%s leaf spans=%s worst case=%s",
			i+1, id, rows, w.spans, header["calls"], header["leaf-spans"], header["worst-case"])
	}

	// A click opens the root row's attributes; Enter and Space, on a
	// focused row, open and close another's.
	first := fmt.Sprintf(`section.trace[data-trace=%q]`, order[0])
	root := first + ` .row[data-span]`
	details := first + ` .attrs`
	do(t, ctx, chromedp.Click(chromedp.CSS(root)), chromedp.WaitVisible(chromedp.CSS(details)))
	shown := text(t, ctx, details)
	assert.Contains(t, shown, "retrace.calls")
	assert.Regexp(t, `retrace\.calls\s+`+strconv.FormatInt(want[order[0]].counts.Calls, 10)+`\s`, shown, "the attribute and its value, side by side in the table")
	assert.Equal(t, "true", attr(t, ctx, root, "aria-expanded"))

	second := first + ` .row[data-span]:nth-child(2 of .row)`
	secondID := attr(t, ctx, second, "aria-controls")
	do(t, ctx, chromedp.Focus(chromedp.CSS(second)), chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.CSS("#"+secondID)))
	assert.Contains(t, text(t, ctx, "#"+secondID), "retrace.attempt")
	do(t, ctx, chromedp.KeyEvent(" "), chromedp.WaitNotVisible(chromedp.CSS("#"+secondID)))

	// The toggle moves the lanes between configured time and wall time:
	// every gap and bar is drawn where its configured position says
	// (--cl, --cw), then, toggled, where its wall-time one says (--wl,
	// --ww). The positions themselves are the generator's, tested with
	// explain's unit tests; this checks that the browser applies them.
	placed := func(mode string) string {
		return fmt.Sprintf(`(() => {
			const out = [];
			for (const el of document.querySelectorAll(%q)) {
				const lane = el.parentElement.getBoundingClientRect(), r = el.getBoundingClientRect(), st = el.style;
				const left = lane.width * parseFloat(st.getPropertyValue("--%[2]sl")) / 100;
				const width = lane.width * parseFloat(st.getPropertyValue("--%[2]sw")) / 100;
				// Borders and min-width keep a bar at least 2px wide.
				if (Math.abs(r.left - lane.left - left) > 1 || Math.abs(r.width - Math.max(width, 2)) > 2) {
					out.push(el.className + " at " + (r.left - lane.left) + "+" + r.width + ", want " + left + "+" + width);
				}
			}
			return JSON.stringify(out);
		})()`, first+` .gap, `+first+` .bar`, mode)
	}
	evalJSON := func(js string) string {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		require.NoError(t, err)
		return v
	}
	assert.Equal(t, "[]", evalJSON(placed("c")), "configured time")
	// The checkbox is worked by keyboard, as a person without a mouse
	// does: Space on the focused box.
	do(t, ctx, chromedp.Focus(chromedp.CSS(`#timebase`)), chromedp.KeyEvent(" "), chromedp.WaitReady(chromedp.CSS(`body.wall`)))
	assert.Equal(t, "[]", evalJSON(placed("w")), "wall time")
	do(t, ctx, chromedp.KeyEvent(" "), chromedp.WaitReady(chromedp.CSS(`body:not(.wall)`)))
	assert.Equal(t, "[]", evalJSON(placed("c")), "configured time again")
	gaps := evalInt(t, ctx, fmt.Sprintf(`document.querySelectorAll(%q).length`, first+` .gap`))
	assert.Equal(t, want[order[0]].backoffs, gaps, "a gap before each attempt that waited")

	// The screenshot shows the page from its top, the root's attributes
	// open.
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`window.scrollTo(0, 0), true`))
	require.NoError(t, err)
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	colours := distinctColours(t, shot)
	assert.Greater(t, colours, 16, "the screenshot is not blank")
	path := filepath.Join(artifacts(t), "waterfall-browser.png")
	require.NoError(t, os.WriteFile(path, shot, 0o644))
	t.Logf("screenshot: %s (%d bytes, %d colours)", path, len(shot), colours)

	got := requests()
	assert.Equal(t, []string{pageURL}, got, "the page fetched nothing but itself")
	t.Logf("network requests: %d (the page itself), %d besides", len(got), len(got)-1)
}

// findChromium returns Chromium's path, or ends the test by needPart.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("RETRACE_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			needPart(t, "RETRACE_CHROMIUM=%s: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	needPart(t, "no Chromium: install Debian's package chromium, or set RETRACE_CHROMIUM to its binary")
	return ""
}

// goBuild builds a package of the core module in the core module (the
// checkout this module lies in, two levels up), as its own tests build it,
// with the environment's flags (CI's -race too), into dir.
func goBuild(t *testing.T, dir, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s: %s", pkg, out)
	return bin
}

// browser starts headless Chromium for one test. Its proxy is an address
// that refuses every connection, so a request that escaped the page's
// policy would fail as well as be counted; the profile is the test's own.
func browser(t *testing.T, path string) (context.Context, context.CancelFunc) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox refuses to start
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("proxy-server", "http://127.0.0.1:9"),
		chromedp.Flag("proxy-bypass-list", "<-loopback>"),
	)
	deadline, stop := context.WithTimeout(context.Background(), browserWait)
	alloc, cancelAlloc := chromedp.NewExecAllocator(deadline, opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	// The first Do starts the browser; it must run on the context that
	// lives as long as the browser.
	require.NoError(t, chromedp.Do(ctx))
	return ctx, func() {
		cancelCtx()
		cancelAlloc()
		stop()
	}
}

// watchRequests turns on the tab's network events and records the URL of
// every request the tab makes; the function it returns reads them.
func watchRequests(t *testing.T, ctx context.Context) func() []string {
	t.Helper()
	var mu sync.Mutex
	var urls []string
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			mu.Lock()
			urls = append(urls, e.Request.URL)
			mu.Unlock()
		}
	}))
	_, err := chromedp.Call(ctx, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), urls...)
	}
}

// stepWait bounds one step's wait for the page (a condition that never
// comes), so that a failure says which step and what the page held
// rather than waiting out browserWait; it is a deadline, not a measure.
const stepWait = time.Minute

// do runs the actions in order, each wait bounded by stepWait; on failure
// it reports the page's state.
func do(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, stepWait)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({body: document.body && document.body.className, focus: document.activeElement && document.activeElement.outerHTML.slice(0, 160), timebase: !!(document.getElementById("timebase") || {}).checked, scrollY: window.scrollY})`))
		t.Fatalf("%v; the page: %s", err, state)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err, "text of %s", sel)
	return strings.TrimSpace(s)
}

func attr(t *testing.T, ctx context.Context, sel, name string) string {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).getAttribute(%q)`, sel, name)))
	require.NoError(t, err, "%s of %s", name, sel)
	return v
}

func evalInt(t *testing.T, ctx context.Context, js string) int {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[int](js))
	require.NoError(t, err, js)
	return v
}

// distinctColours decodes a PNG and counts its colours: a blank or
// single-colour page has one or two.
func distinctColours(t *testing.T, b []byte) int {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err, "the screenshot is a PNG")
	seen := map[[4]uint32]bool{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, ca := img.At(x, y).RGBA()
			seen[[4]uint32{cr, cg, cb, ca}] = true
		}
	}
	return len(seen)
}

// artifacts is where the screenshot goes: RETRACE_ARTIFACTS, a directory
// CI keeps, else the test's temporary directory.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("RETRACE_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// readTraces reads the OTLP JSON file as a reader other than explain
// would: each trace's spans, counted by retracetest.TraceCounts, and its
// backoffs.
func readTraces(t *testing.T, path string) ([]string, map[string]expected) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rs, err := setup.ReadOTLPJSON(f)
	require.NoError(t, err)
	all, err := setup.ReadOnlySpans(rs)
	require.NoError(t, err)
	var order []string
	byTrace := map[string][]sdktrace.ReadOnlySpan{}
	for _, ro := range all {
		id := ro.SpanContext().TraceID().String()
		if _, ok := byTrace[id]; !ok {
			order = append(order, id)
		}
		byTrace[id] = append(byTrace[id], ro)
	}
	out := map[string]expected{}
	for id, spans := range byTrace {
		c, err := retracetest.TraceCounts(spans)
		require.NoError(t, err, "trace %s", id)
		e := expected{spans: len(spans), counts: c}
		for _, s := range spans {
			for _, kv := range s.Attributes() {
				if kv.Key == telemetry.RetryDelayMs && kv.Value.AsInt64() > 0 {
					e.backoffs++
				}
			}
		}
		out[id] = e
	}
	return order, out
}
