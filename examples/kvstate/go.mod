module example.com/kvstate

go 1.26.0

require (
	github.com/retrace-go/retrace v0.6.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/failsafe-go/failsafe-go v0.9.8 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
)

replace github.com/retrace-go/retrace => ../..
