// Package browser tests retrace explain -html in a real browser: headless
// Chromium loads the page from disk (file://), and the test reads the DOM
// through the DevTools protocol (github.com/chromedp/chromedp). It is a
// module of its own so that the core module does not require chromedp.
//
//	cd e2e/browser && go test ./...
//
// Chromium is found as RETRACE_CHROMIUM names it, else as chromium or
// chromium-browser on PATH (Debian's package chromium). Without it the test
// skips, saying why; with CI=true, as CI sets it, it fails instead: CI must
// not pass without having looked at the page in a browser. The screenshot
// it takes goes to RETRACE_ARTIFACTS (a directory), else to the test's
// temporary directory; the test logs its path.
package browser
