package dnsdiscovery

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/discovery"
)

// TestReadme_httpClient runs the README's net/http example as it is
// printed there (the README's snippet test holds its lines to this
// function's): a balanced http.Client following the name api.internal,
// whose three A records an in-process DNS server on loopback answers, over
// three HTTP servers on loopback.
//
// The expected shares: LeastConn picks the peer with the fewest attempts
// in flight per weight, smooth weighted round robin among ties. Requests
// made one at a time leave every peer at 0 in flight, so every pick is a
// tie among three peers of weight 1, and the smooth order over equal
// weights is a rotation: 30 requests are 10 on each server. Then the
// records lose one address; the Watcher is told to look again by
// re-running Watch's first lookup through a second Watcher on the same
// picker (no waiting for the 5 s interval), and 30 more requests are 15
// on each of the two servers left.
func TestReadme_httpClient(t *testing.T) {
	port, served := backendsOnOnePort(t, 3)
	z := newZone(t)
	z.set(t, "api.internal. 30 IN A 127.0.0.2", "api.internal. 30 IN A 127.0.0.3", "api.internal. 30 IN A 127.0.0.4")
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, z.addr)
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The README's lines, from here to the client (resolver nil in a
	// program: the system's).
	lb, err := balancer.NewLeastConn(nil)
	if err != nil {
		log.Fatal(err)
	}
	w, err := discovery.Watch(ctx, lb, discovery.Host{Name: "api.internal", Port: port, Resolver: resolver}, discovery.Config{})
	if err != nil {
		log.Fatal(err) // the first lookup failed: nothing to balance over
	}
	defer w.Close()
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: lb}}

	get := func(n int) {
		t.Helper()
		for range n {
			resp, err := client.Get("http://api.internal/")
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
		}
	}
	counts := func() []int64 {
		out := make([]int64, len(served))
		for i, c := range served {
			out[i] = c.Load()
		}
		return out
	}
	get(30)
	assert.Equal(t, []int64{10, 10, 10}, counts(), "a rotation over the name's three addresses")

	z.set(t, "api.internal. 30 IN A 127.0.0.2", "api.internal. 30 IN A 127.0.0.4")
	again, err := discovery.Watch(ctx, lb, discovery.Host{Name: "api.internal", Port: port, Resolver: resolver}, discovery.Config{})
	require.NoError(t, err)
	require.NoError(t, again.Close())
	get(30)
	assert.Equal(t, []int64{25, 10, 25}, counts(), "127.0.0.3 left with its record")
	for _, p := range lb.Peers() {
		assert.Zero(t, p.InFlight(), "%s left in flight", p.Addr())
	}
	client.CloseIdleConnections()
}
