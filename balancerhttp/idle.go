package balancerhttp

import "net/http"

// closeIdler is what http.Client.CloseIdleConnections looks for.
type closeIdler interface{ CloseIdleConnections() }

var (
	_ closeIdler = (*Transport)(nil)
	_ closeIdler = (*Proxy)(nil)
)

// CloseIdleConnections closes the idle connections of Base (the default
// one included) to every peer, if Base has such a method, as
// *http.Transport does. http.Client.CloseIdleConnections calls it. It
// interrupts no connection in use.
func (t *Transport) CloseIdleConnections() {
	t.once.Do(t.init)
	closeIdle(t.base)
}

// CloseIdleConnections closes the idle connections of Transport (the
// default one included) to every backend, if Transport has such a method,
// as *http.Transport does. It interrupts no connection in use.
func (p *Proxy) CloseIdleConnections() {
	p.once.Do(p.init)
	closeIdle(p.tr)
}

func closeIdle(rt http.RoundTripper) {
	if c, ok := rt.(closeIdler); ok {
		c.CloseIdleConnections()
	}
}
