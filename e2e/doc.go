// Package e2e holds retrace's end-to-end test against a real Jaeger: it runs
// the demo's scenarios exporting over OTLP gRPC and reads the traces back
// through Jaeger's HTTP API. It needs the build tag e2e:
//
//	scripts/jaeger.sh build       # once; the binary is kept between runs
//	go test -tags e2e ./e2e
package e2e
