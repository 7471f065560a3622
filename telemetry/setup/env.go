package setup

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/retrace-go/retrace/internal/redact"
)

// The OTLP protocols setup speaks, as OTEL_EXPORTER_OTLP_PROTOCOL names
// them.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Exporters describes what the OTEL_* variables ask of one signal.
type Exporters struct {
	OTLP     bool   // export over OTLP
	Protocol string // with OTLP: ProtocolGRPC or ProtocolHTTP
	Endpoint string // with OTLP: host:port of the receiver
	URL      string // with OTLP/HTTP: the URL the data is posted to
	Insecure bool   // with OTLP: plain text (no TLS)
	Console  bool   // print trees (traces) or a summary at shutdown (metrics)
	None     bool   // record nothing
	// Prometheus, for metrics, is the host:port of the scrape endpoint
	// (OTEL_METRICS_EXPORTER=prometheus): OTEL_EXPORTER_PROMETHEUS_HOST and
	// _PORT, localhost:9464 by default; "" when Prometheus is not asked for.
	Prometheus string
	// Registered is an exporter name setup does not build itself (a name a
	// program registered with autoexport.RegisterSpanExporter or
	// RegisterMetricReader): autoexport builds it, from the process
	// environment.
	Registered string
}

// ReadEnv reads what the OTEL_* variables ask of tracing:
//
//   - OTEL_SDK_DISABLED=true: nothing.
//   - OTEL_TRACES_EXPORTER, a comma-separated list of otlp, console (retrace's
//     tree; logging and stdout are its other names) and none (which wins);
//     another name, alone, is left to autoexport's registry. Unset, it is
//     otlp, the specification's default, when an OTLP endpoint or protocol
//     variable is set, and console when none is: a program run with no
//     OTel configuration at all prints its trees rather than sending them
//     to a receiver nobody started.
//   - OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL: grpc or http/protobuf. Unset, it
//     is http/protobuf, the specification's default, except for an endpoint
//     written without a scheme ("localhost:4317"), which retrace has always
//     read as insecure gRPC.
//   - OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT: host:port or a URL; unset,
//     localhost:4318 (http/protobuf) or localhost:4317 (grpc). For OTLP/HTTP
//     a base endpoint gets the signal's path appended (/v1/traces) and a
//     per-signal URL is used as it is, as the specification says; host:port
//     is the receiver's address, and gets the signal's path.
//   - OTEL_EXPORTER_OTLP_(TRACES_)INSECURE: for gRPC, and for an endpoint
//     without a scheme, whether the connection is plain text.
//
// The OTLP headers (OTEL_EXPORTER_OTLP_(TRACES_)HEADERS) are read when the
// exporter is built, and are never printed.
func ReadEnv(getenv func(string) string) (Exporters, error) { return readEnv(getenv, "TRACES") }

// readEnv reads what the OTEL_* variables ask of one signal (TRACES,
// METRICS).
func readEnv(getenv func(string) string, signal string) (Exporters, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Exporters{None: true}, nil
	}
	exporterVar := "OTEL_" + signal + "_EXPORTER"
	endpointVar, endpoint := firstVar(getenv, "OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
	protocolVar, protocol := firstVar(getenv, "OTEL_EXPORTER_OTLP_"+signal+"_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")

	var names []string
	for k := range strings.SplitSeq(getenv(exporterVar), ",") {
		if k = strings.TrimSpace(k); k != "" {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		if endpoint != "" || protocol != "" {
			names = []string{"otlp"}
		} else {
			names = []string{"console"}
		}
	}
	var x Exporters
	for _, k := range names {
		switch strings.ToLower(k) {
		case "otlp":
			x.OTLP = true
		case "console", "logging", "stdout":
			x.Console = true
		case "none":
			x.None = true
		case "prometheus":
			if signal != "METRICS" {
				return Exporters{}, fmt.Errorf("setup: %s=%q: prometheus serves metrics only", exporterVar, getenv(exporterVar))
			}
			host, port := first(getenv("OTEL_EXPORTER_PROMETHEUS_HOST"), "localhost"), first(getenv("OTEL_EXPORTER_PROMETHEUS_PORT"), "9464")
			if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
				return Exporters{}, fmt.Errorf("setup: OTEL_EXPORTER_PROMETHEUS_PORT=%q: want a port number (0 for any free port)", port)
			}
			x.Prometheus = net.JoinHostPort(host, port)
		default:
			// autoexport reads the variable whole, as one name.
			if len(names) > 1 {
				return Exporters{}, fmt.Errorf("setup: %s=%q: %q is built by autoexport, which takes one name: set it alone, or use otlp, console and none",
					exporterVar, getenv(exporterVar), k)
			}
			x.Registered = k
		}
	}
	if x.None {
		return Exporters{None: true}, nil
	}
	if !x.OTLP {
		return x, nil
	}

	schemeless := endpoint != "" && !strings.Contains(endpoint, "://")
	switch p := strings.ToLower(protocol); {
	case p == "" && schemeless, p == ProtocolGRPC:
		x.Protocol = ProtocolGRPC
	case p == "", p == ProtocolHTTP:
		x.Protocol = ProtocolHTTP
	default:
		return Exporters{}, fmt.Errorf("setup: %s=%q: want %s or %s", protocolVar, protocol, ProtocolGRPC, ProtocolHTTP)
	}
	insecure := first(getenv("OTEL_EXPORTER_OTLP_"+signal+"_INSECURE"), getenv("OTEL_EXPORTER_OTLP_INSECURE"))
	var err error
	if x.Protocol == ProtocolGRPC {
		x.Endpoint, x.Insecure, err = grpcEndpoint(first(endpoint, "localhost:4317"))
		if insecure != "" {
			x.Insecure = strings.EqualFold(insecure, "true")
		}
	} else {
		perSignal := endpointVar == "OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT" && !schemeless
		x.URL, x.Endpoint, x.Insecure, err = httpEndpoint(first(endpoint, "localhost:4318"), perSignal, "/v1/"+strings.ToLower(signal), insecure)
	}
	if err != nil {
		return Exporters{}, fmt.Errorf("setup: %s: %w", first(endpointVar, "the default OTLP endpoint"), err)
	}
	return x, nil
}

// grpcEndpoint turns an OTLP/gRPC endpoint into host:port and whether it
// is plain text: "localhost:4317" and "http://…" are, "https://…" is not. A
// URL without a port gets OTLP/gRPC's, 4317.
func grpcEndpoint(e string) (hostport string, insecure bool, err error) {
	if !strings.Contains(e, "://") {
		if err := checkHostPort(e); err != nil {
			return "", false, err
		}
		return e, true, nil
	}
	u, err := url.Parse(e)
	if err != nil || u.Host == "" {
		return "", false, fmt.Errorf("%s: want host:port or a URL", showEndpoint(e))
	}
	switch u.Scheme {
	case "http", "grpc":
		insecure = true
	case "https", "grpcs":
	default:
		return "", false, fmt.Errorf("%s: unknown scheme %q for OTLP/gRPC", showEndpoint(e), u.Scheme)
	}
	hostport = u.Host
	if u.Port() == "" {
		hostport = net.JoinHostPort(u.Hostname(), "4317")
	}
	return hostport, insecure, nil
}

// httpEndpoint turns an OTLP/HTTP endpoint into the URL the data is posted
// to, its host:port and whether it is plain text. A base endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, or any host:port) gets path appended to its
// own path ("https://gateway/otlp" posts to "https://gateway/otlp/v1/traces");
// a per-signal URL is used as it is, "/" when it has no path. host:port is
// plain HTTP unless insecure says "false". The user and query parts of a URL
// are dropped: the exporter sends neither.
func httpEndpoint(e string, perSignal bool, path, insecure string) (rawURL, hostport string, plain bool, err error) {
	if !strings.Contains(e, "://") {
		if err := checkHostPort(e); err != nil {
			return "", "", false, err
		}
		scheme := "http"
		if strings.EqualFold(insecure, "false") {
			scheme = "https"
		}
		e = scheme + "://" + e
	}
	u, err := url.Parse(e)
	if err != nil || u.Host == "" {
		return "", "", false, fmt.Errorf("%s: want host:port or a URL", showEndpoint(e))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", "", false, fmt.Errorf("%s: unknown scheme %q for OTLP/HTTP: want http or https", showEndpoint(e), u.Scheme)
	}
	p := u.Path
	switch {
	case !perSignal:
		p = strings.TrimSuffix(p, "/") + path
	case p == "":
		p = "/"
	}
	out := url.URL{Scheme: u.Scheme, Host: u.Host, Path: p}
	return out.String(), u.Host, u.Scheme == "http", nil
}

// checkHostPort accepts an endpoint without a scheme only as host:port:
// anything more is a URL that lost its scheme.
func checkHostPort(e string) error {
	if strings.ContainsAny(e, "/?#@") {
		return fmt.Errorf("%s: want host:port or a URL", showEndpoint(e))
	}
	if _, _, err := net.SplitHostPort(e); err != nil {
		return fmt.Errorf("%s: want host:port or a URL", showEndpoint(e))
	}
	return nil
}

// showEndpoint is an endpoint as an error or a warning may print it: a
// URL's user and query parts, where credentials can hide, are left out,
// and what is left goes through retrace's redaction.
func showEndpoint(e string) string {
	if u, err := url.Parse(e); err == nil && u.Host != "" {
		u.User, u.RawQuery, u.ForceQuery, u.Fragment = nil, "", false, ""
		e = u.String()
	} else if i := strings.LastIndexByte(e, '@'); i >= 0 {
		e = "…" + e[i:]
	}
	return fmt.Sprintf("%q", redact.Text(e, nil, 200))
}

// readHeaders reads the OTLP headers of a signal,
// OTEL_EXPORTER_OTLP_(signal_)HEADERS: "k1=v1,k2=v2", values
// percent-encoded, as the OTel exporters read them. A pair they could not
// read is an error here, naming the variable and the pair's place or key
// only: the exporters would log the pair, value and all, and the values
// often carry tokens.
func readHeaders(getenv func(string) string, signal string) (map[string]string, error) {
	name, s := firstVar(getenv, "OTEL_EXPORTER_OTLP_"+signal+"_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
	h := map[string]string{}
	if s == "" {
		return h, nil
	}
	for i, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("setup: %s: pair %d is not key=value", name, i+1)
		}
		dv, err := url.PathUnescape(v)
		if err != nil {
			return nil, fmt.Errorf("setup: %s: the value of %q is not percent-encoded", name, k)
		}
		h[k] = strings.TrimSpace(dv)
	}
	return h, nil
}

// headerValues are the values of h, the known secrets a warning is
// redacted of.
func headerValues(h map[string]string) []string {
	vs := make([]string, 0, len(h))
	for _, v := range h {
		if v != "" {
			vs = append(vs, v)
		}
	}
	return vs
}

// firstVar returns the first of the variables that is set, and its value.
func firstVar(getenv func(string) string, names ...string) (name, value string) {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return n, v
		}
	}
	return "", ""
}

func first(vs ...string) string {
	for _, v := range vs {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}
