package dnsdiscovery

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/discovery"
)

func addrs(res discovery.Result) []string {
	var out []string
	for _, t := range res.Targets {
		out = append(out, t.Addr)
	}
	return out
}

// TestHost: A and AAAA records with the port, sorted, once each, and the
// least TTL of the records, a CNAME's included.
func TestHost(t *testing.T) {
	z := newZone(t)
	z.set(t,
		"api.test. 30 IN A 127.0.0.3", "api.test. 7 IN A 127.0.0.2", "api.test. 30 IN A 127.0.0.3",
		"api.test. 20 IN AAAA ::1",
		"alias.test. 4 IN CNAME api.test.",
	)
	ctx := context.Background()
	res, err := Host{Name: "api.test", Port: "8080", Server: z.addr}.Resolve(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.2:8080", "127.0.0.3:8080", "[::1]:8080"}, addrs(res))
	assert.Equal(t, 7*time.Second, res.TTL)

	res, err = Host{Name: "alias.test", Port: "80", Server: z.addr}.Resolve(ctx)
	require.NoError(t, err)
	assert.Equal(t, 4*time.Second, res.TTL, "the CNAME's TTL is the least")
	assert.Len(t, res.Targets, 3)

	res, err = Host{Name: "api.test", Port: "80", Server: z.addr, Network: "ip4"}.Resolve(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.2:80", "127.0.0.3:80"}, addrs(res))

	z.set(t, "zero.test. 0 IN A 127.0.0.9")
	res, err = Host{Name: "zero.test", Port: "80", Server: z.addr}.Resolve(ctx)
	require.NoError(t, err)
	assert.Equal(t, time.Nanosecond, res.TTL, "a TTL of 0 is known: the Watcher raises it to its minimum")
}

// TestHost_failures: NXDOMAIN and a name without addresses are
// ErrNoAddresses; SERVFAIL, REFUSED and a server that does not answer are
// other errors; bad arguments are refused before any question.
func TestHost_failures(t *testing.T) {
	z := newZone(t)
	z.set(t, "txt.test. 30 IN TXT \"no address\"", "bad.test. 30 IN A 127.0.0.2", "refused.test. 30 IN A 127.0.0.2", "slow.test. 30 IN A 127.0.0.2")
	z.fail("bad.test", dns.RcodeServerFailure)
	z.fail("refused.test", dns.RcodeRefused)
	z.flag(z.hang, "slow.test")
	ctx := context.Background()

	_, err := Host{Name: "nowhere.test", Port: "80", Server: z.addr}.Resolve(ctx)
	assert.ErrorIs(t, err, discovery.ErrNoAddresses)
	assert.Contains(t, err.Error(), "NXDOMAIN")
	_, err = Host{Name: "txt.test", Port: "80", Server: z.addr}.Resolve(ctx)
	assert.ErrorIs(t, err, discovery.ErrNoAddresses)

	_, err = Host{Name: "bad.test", Port: "80", Server: z.addr}.Resolve(ctx)
	require.Error(t, err)
	assert.NotErrorIs(t, err, discovery.ErrNoAddresses)
	assert.Contains(t, err.Error(), "SERVFAIL")
	_, err = Host{Name: "refused.test", Port: "80", Server: z.addr}.Resolve(ctx)
	assert.Contains(t, err.Error(), "REFUSED")

	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = Host{Name: "slow.test", Port: "80", Server: z.addr}.Resolve(tctx)
	require.Error(t, err)
	assert.NotErrorIs(t, err, discovery.ErrNoAddresses)

	for _, h := range []Host{{Port: "80"}, {Name: "a.test"}, {Name: "a.test", Port: "http"}, {Name: "a.test", Port: "70000"}, {Name: "a.test", Port: "80", Network: "tcp", Server: z.addr}} {
		_, err := h.Resolve(ctx)
		assert.Error(t, err, "%+v", h)
	}
	z.mu.Lock()
	assert.Zero(t, z.asked["a.test. A udp"], "refused before asking")
	z.mu.Unlock()
}

// TestHost_truncated: a truncated UDP answer is asked again over TCP.
func TestHost_truncated(t *testing.T) {
	z := newZone(t)
	z.set(t, "big.test. 30 IN A 127.0.0.2")
	z.flag(z.truncate, "big.test")
	res, err := Host{Name: "big.test", Port: "80", Server: z.addr, Network: "ip4"}.Resolve(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.2:80"}, addrs(res))
	z.mu.Lock()
	assert.Equal(t, 1, z.asked["big.test. A tcp"])
	z.mu.Unlock()
}

// TestSRV: nginx's service= mapping: the lowest priority primary, the
// others backups; weights (0 read as 1) and ports from the records; a
// target that does not resolve left out; _SERVICE._tcp.NAME, or
// SERVICE.NAME when SERVICE has a dot.
func TestSRV(t *testing.T) {
	z := newZone(t)
	z.set(t,
		"_http._tcp.svc.test. 60 IN SRV 10 5 8081 a.test.",
		"_http._tcp.svc.test. 60 IN SRV 10 0 8082 b.test.",
		"_http._tcp.svc.test. 60 IN SRV 20 1 8083 c.test.",
		"_http._tcp.svc.test. 60 IN SRV 10 1 8084 gone.test.",
		"a.test. 9 IN A 127.0.0.2",
		"b.test. 30 IN A 127.0.0.3",
		"c.test. 30 IN A 127.0.0.4",
	)
	want := []discovery.Target{
		{Addr: "127.0.0.2:8081", Weight: 5},
		{Addr: "127.0.0.3:8082", Weight: 1},
		{Addr: "127.0.0.4:8083", Weight: 1, Backup: true},
	}
	for _, svc := range []SRV{{Service: "http", Name: "svc.test"}, {Service: "_http._tcp", Name: "svc.test"}} {
		svc.Server, svc.Network = z.addr, "ip4"
		res, err := svc.Resolve(context.Background())
		require.NoError(t, err)
		assert.Equal(t, want, res.Targets)
		assert.Equal(t, 9*time.Second, res.TTL)
	}
	_, err := SRV{Service: "grpc", Name: "svc.test", Server: z.addr}.Resolve(context.Background())
	assert.ErrorIs(t, err, discovery.ErrNoAddresses)
}

// TestNetResolver: discovery's own Host and SRV, over net.Resolver,
// against the same server: the same targets as nginx maps them.
func TestNetResolver(t *testing.T) {
	z := newZone(t)
	z.set(t,
		"api.test. 30 IN A 127.0.0.3", "api.test. 30 IN A 127.0.0.2",
		"_http._tcp.svc.test. 60 IN SRV 10 5 8081 api.test.",
		"_http._tcp.svc.test. 60 IN SRV 20 0 8083 c.test.",
		"c.test. 30 IN A 127.0.0.4",
	)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, z.addr)
	}}
	ctx := context.Background()
	res, err := discovery.Host{Name: "api.test", Port: "80", Resolver: r}.Resolve(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.2:80", "127.0.0.3:80"}, addrs(res))
	assert.Zero(t, res.TTL, "net.Resolver does not tell the TTL")

	res, err = discovery.SRV{Service: "http", Name: "svc.test", Resolver: r}.Resolve(ctx)
	require.NoError(t, err)
	assert.Equal(t, []discovery.Target{
		{Addr: "127.0.0.2:8081", Weight: 5},
		{Addr: "127.0.0.3:8081", Weight: 5},
		{Addr: "127.0.0.4:8083", Weight: 1, Backup: true},
	}, res.Targets)

	_, err = discovery.Host{Name: "nowhere.test", Port: "80", Resolver: r}.Resolve(ctx)
	assert.ErrorIs(t, err, discovery.ErrNoAddresses)
	z.fail("api.test", dns.RcodeServerFailure)
	_, err = discovery.Host{Name: "api.test", Port: "80", Resolver: r}.Resolve(ctx)
	require.Error(t, err)
	assert.NotErrorIs(t, err, discovery.ErrNoAddresses)
}

// TestHost_lyingServer: records of names not asked about (neither the name
// nor a CNAME it leads to) are left out, as net's resolver leaves them
// out, and their TTLs do not count; a CNAME loop is no address; a TTL with
// its top bit set is 0 (RFC 2181 section 8).
func TestHost_lyingServer(t *testing.T) {
	z := newZone(t)
	z.set(t, "api.test. 30 IN A 127.0.0.2", "alias.test. 30 IN CNAME api.test.",
		"srv.test. 60 IN A 127.0.0.5",
		"_http._tcp.svc.test. 30 IN SRV 1 1 80 srv.test.",
		"loop1.test. 30 IN CNAME loop2.test.", "loop2.test. 30 IN CNAME loop1.test.",
		"big.test. 2147483648 IN A 127.0.0.7")
	z.lie(t, "api.test", "evil.test. 1 IN A 10.6.6.6", "evil.test. 1 IN CNAME api.test.")
	z.lie(t, "alias.test", "other.test. 1 IN A 10.6.6.7")
	z.lie(t, "_http._tcp.svc.test", "_http._tcp.evil.test. 1 IN SRV 1 1 80 evil.test.")
	z.lie(t, "loop1.test", "loop2.test. 30 IN CNAME loop1.test.", "stray.test. 30 IN A 10.6.6.8")
	ctx := context.Background()

	res, err := Host{Name: "api.test", Port: "80", Server: z.addr}.Resolve(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.2:80"}, addrs(res))
	assert.Equal(t, 30*time.Second, res.TTL)

	res, err = Host{Name: "alias.test", Port: "80", Server: z.addr}.Resolve(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.2:80"}, addrs(res))
	assert.Equal(t, 30*time.Second, res.TTL)

	res, err = SRV{Service: "http", Name: "svc.test", Server: z.addr}.Resolve(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.5:80"}, addrs(res))
	assert.Equal(t, 30*time.Second, res.TTL)

	_, err = Host{Name: "loop1.test", Port: "80", Server: z.addr}.Resolve(ctx)
	assert.ErrorIs(t, err, discovery.ErrNoAddresses)

	res, err = Host{Name: "big.test", Port: "80", Server: z.addr}.Resolve(ctx)
	require.NoError(t, err)
	assert.Equal(t, time.Nanosecond, res.TTL, "a TTL above 2^31-1 is 0")
}

// TestNetHost_unspecified: discovery.Host (net's resolver) leaves out
// 0.0.0.0 and :: as this package's Host does (a dial to them reaches the
// local host, not a peer), and reads an IPv4-mapped address as IPv4, once.
func TestNetHost_unspecified(t *testing.T) {
	z := newZone(t)
	z.set(t, "api.test. 30 IN A 0.0.0.0", "api.test. 30 IN A 127.0.0.2",
		"api.test. 30 IN AAAA ::", "api.test. 30 IN AAAA ::ffff:127.0.0.2", "api.test. 30 IN AAAA ::ffff:0.0.0.0",
		"zero.test. 30 IN A 0.0.0.0")
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, z.addr)
	}}
	ctx := context.Background()
	for _, h := range []discovery.Resolver{
		discovery.Host{Name: "api.test", Port: "80", Resolver: r},
		Host{Name: "api.test", Port: "80", Server: z.addr},
	} {
		res, err := h.Resolve(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"127.0.0.2:80"}, addrs(res), "%T", h)
	}
	res, err := discovery.Host{Name: "zero.test", Port: "80", Resolver: r}.Resolve(ctx)
	if err == nil {
		assert.Empty(t, res.Targets)
	}
	lb, err := balancer.NewSmoothWRR([]*balancer.Peer{balancer.NewPeer("10.0.0.1:80")})
	require.NoError(t, err)
	_, err = discovery.Watch(ctx, lb, discovery.Host{Name: "zero.test", Port: "80", Resolver: r}, discovery.Config{})
	assert.ErrorIs(t, err, discovery.ErrNoAddresses)
}

// TestHost_otherQuestion: a reply about another question than the one
// asked (its records, or its NXDOMAIN) is refused, not read as the
// answer.
func TestHost_otherQuestion(t *testing.T) {
	z := newZone(t)
	z.set(t, "api.test. 30 IN A 127.0.0.2", "other.test. 30 IN A 10.6.6.6")
	z.mu.Lock()
	z.swap["api.test."] = "other.test."
	z.swap["gone.test."] = "nowhere.test."
	z.mu.Unlock()
	_, err := Host{Name: "api.test", Port: "80", Server: z.addr, Network: "ip4"}.Resolve(context.Background())
	assert.ErrorContains(t, err, "question")
	_, err = Host{Name: "gone.test", Port: "80", Server: z.addr, Network: "ip4"}.Resolve(context.Background())
	assert.ErrorContains(t, err, "question")
	assert.NotErrorIs(t, err, discovery.ErrNoAddresses)
}

// TestNetSRV_badTarget: a record whose target is not a valid name leaves
// the others standing, for discovery.SRV (net's resolver answers them
// with an error) as for this package's SRV.
func TestNetSRV_badTarget(t *testing.T) {
	z := newZone(t)
	z.set(t, "_http._tcp.svc.test. 30 IN SRV 1 1 80 a.test.", "_http._tcp.svc.test. 30 IN SRV 1 1 81 bad!name.test.", "a.test. 30 IN A 127.0.0.2")
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, z.addr)
	}}
	for _, s := range []discovery.Resolver{
		discovery.SRV{Service: "http", Name: "svc.test", Resolver: r},
		SRV{Service: "http", Name: "svc.test", Server: z.addr},
	} {
		res, err := s.Resolve(context.Background())
		require.NoError(t, err, "%T", s)
		assert.Equal(t, []string{"127.0.0.2:80"}, addrs(res), "%T", s)
	}
}

// TestHost_cancel: a lookup of a server that does not answer ends when its
// context is cancelled (a Watcher's Close), not when the DNS client's own
// read timeout (2s) runs out.
func TestHost_cancel(t *testing.T) {
	z := newZone(t)
	z.set(t, "slow.test. 30 IN A 127.0.0.2")
	z.flag(z.hang, "slow.test")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Host{Name: "slow.test", Port: "80", Server: z.addr}.Resolve(ctx)
		done <- err
	}()
	for asked := false; !asked; {
		z.mu.Lock()
		asked = z.asked["slow.test. A udp"] > 0
		z.mu.Unlock()
		select {
		case err := <-done:
			t.Fatalf("Resolve ended before its question: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(1500 * time.Millisecond):
		t.Fatal("Resolve did not end when its context was cancelled")
	}
}
