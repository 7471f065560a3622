package session

import (
	"net/url"
	"strconv"
)

// serverOf is the host and port of base, a provider's base URL: def on 443
// when base is empty (the SDK's default), the scheme's default port when
// the URL names none, and no host when base does not parse.
func serverOf(base, def string) (string, int) {
	if base == "" {
		return def, 443
	}
	u, err := url.Parse(base)
	if err != nil || u.Hostname() == "" {
		return "", 0
	}
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return u.Hostname(), p
	}
	if u.Scheme == "http" {
		return u.Hostname(), 80
	}
	return u.Hostname(), 443
}
