// Package e2e holds retrace's end-to-end tests against real parts. Against
// a real Jaeger, it runs the demo's scenarios exporting over OTLP (gRPC, and
// HTTP/protobuf for one trace both ways) and reads the traces back through
// Jaeger's HTTP API. Against a real Prometheus (Debian's package
// prometheus), it runs the demo through a lasting outage with its metrics
// served for scraping, and checks that every alert of
// deploy/prometheus/retrace-alerts.yml fires and every query of
// deploy/grafana/retrace.json returns series; promtool checks and unit-tests
// the rules. It needs the build tag e2e:
//
//	scripts/jaeger.sh build       # once; the binary is kept between runs
//	apt-get install prometheus    # prometheus and promtool
//	go test -tags e2e ./e2e
//
// A test that needs a real part (Jaeger; later Redis or a contrib module's
// server) and cannot have it calls needPart with the reason. With CI=true in
// the environment, as CI sets it, the test then fails: CI must not pass
// without having checked what the test is for. Without it, the test skips
// and says why.
package e2e
