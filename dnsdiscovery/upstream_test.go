package dnsdiscovery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/discovery"
	"github.com/lbgo/balancer/upstream"
)

// TestBlockWatch: an nginx upstream block with resolve servers, its
// resolver the test's DNS server, followed by upstream's Block.Watch: the
// static server as written, the resolve server's addresses with its port
// and parameters, the service's SRV targets with their ports, weights
// (the server's weight is the default) and priorities; then the records
// change and the peers follow, the static server staying.
func TestBlockWatch(t *testing.T) {
	z := newZone(t)
	z.set(t,
		"api.test. 30 IN A 127.0.0.2", "api.test. 30 IN A 127.0.0.3",
		"_http._tcp.svc.test. 30 IN SRV 10 4 9001 a.test.",
		"_http._tcp.svc.test. 30 IN SRV 20 1 9002 b.test.",
		"a.test. 30 IN A 127.0.0.4", "b.test. 30 IN A 127.0.0.5",
	)
	conf := fmt.Sprintf(`upstream back {
	zone back 64k;
	resolver %s valid=1s;
	server 10.0.0.9:80 weight=2;
	server api.test:8080 resolve max_fails=3 fail_timeout=5s;
	server svc.test service=http resolve;
}`, z.addr)
	b, err := upstream.Parse("nginx.conf", []byte(conf))
	require.NoError(t, err)
	lb, err := balancer.NewSmoothWRR(nil)
	require.NoError(t, err)
	w, err := b.Watch(context.Background(), lb, discovery.Config{Interval: 10 * time.Millisecond, MinInterval: time.Millisecond})
	require.NoError(t, err)
	defer w.Close()

	type peer struct {
		addr           string
		weight, fails  int
		backup         bool
		timeoutSeconds float64
	}
	list := func() []peer {
		var out []peer
		for _, p := range lb.Peers() {
			out = append(out, peer{p.Addr(), p.Weight(), p.MaxFails(), p.IsBackup(), p.FailTimeout().Seconds()})
		}
		return out
	}
	assert.Equal(t, []peer{
		{"10.0.0.9:80", 2, 1, false, 10},
		{"127.0.0.2:8080", 1, 3, false, 5},
		{"127.0.0.3:8080", 1, 3, false, 5},
		{"127.0.0.4:9001", 4, 1, false, 10},
		{"127.0.0.5:9002", 1, 1, true, 10},
	}, list())

	z.set(t, "api.test. 30 IN A 127.0.0.6")
	want := []peer{
		{"10.0.0.9:80", 2, 1, false, 10},
		{"127.0.0.6:8080", 1, 3, false, 5},
		{"127.0.0.4:9001", 4, 1, false, 10},
		{"127.0.0.5:9002", 1, 1, true, 10},
	}
	deadline := time.Now().Add(10 * time.Second)
	for !assert.ObjectsAreEqual(want, list()) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // the test waits for the Watcher's next lookup
	}
	assert.Equal(t, want, list())
}
