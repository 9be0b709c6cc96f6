package dnsdiscovery

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
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

// TestBlockWatch_ipv6Off: the resolver's ipv6=off asks for A records
// only, ipv4=off AAAA only, as nginx does.
func TestBlockWatch_ipv6Off(t *testing.T) {
	z := newZone(t)
	z.set(t, "api.test. 30 IN A 127.0.0.2", "api.test. 30 IN AAAA ::1",
		"_http._tcp.svc.test. 30 IN SRV 1 1 9001 api.test.")
	for _, tt := range []struct{ param, want string }{{"ipv6=off", "127.0.0.2"}, {"ipv4=off", "::1"}} {
		conf := fmt.Sprintf("upstream back {\n zone back 64k;\n resolver %s %s;\n server api.test:80 resolve;\n server svc.test service=http resolve;\n}", z.addr, tt.param)
		b, err := upstream.Parse("nginx.conf", []byte(conf))
		require.NoError(t, err)
		lb, err := balancer.NewSmoothWRR(nil)
		require.NoError(t, err)
		w, err := b.Watch(context.Background(), lb, discovery.Config{})
		require.NoError(t, err)
		require.NoError(t, w.Close())
		var got []string
		for _, p := range lb.Peers() {
			got = append(got, p.Addr())
		}
		assert.Equal(t, []string{net.JoinHostPort(tt.want, "80"), net.JoinHostPort(tt.want, "9001")}, got, tt.param)
	}
}

// TestWatchFile_onError: WatchFile's reports come from two goroutines, the
// file's and the block's Watcher; they never overlap (c.OnError needs no
// lock of its own), and a failed first lookup of a changed block is
// reported once.
func TestWatchFile_onError(t *testing.T) {
	z := newZone(t)
	z.set(t, "api.test. 30 IN A 127.0.0.2")
	path := filepath.Join(t.TempDir(), "up.conf")
	conf := func(name string) []byte {
		return []byte(fmt.Sprintf("upstream back {\n zone back 64k;\n resolver %s;\n server %s:80 resolve;\n}\n", z.addr, name))
	}
	require.NoError(t, os.WriteFile(path, conf("api.test"), 0o644))
	const every = 7 * time.Millisecond
	fileGo, fileReady, blockGo := make(chan struct{}), make(chan struct{}), make(chan struct{})
	wait := func(ctx context.Context, d time.Duration) error {
		release := blockGo
		if d == every {
			release = fileGo
			select {
			case fileReady <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var inside atomic.Int32
	var mu sync.Mutex
	var reported []error
	overlap := false
	firstIn, secondIn := make(chan struct{}), make(chan struct{}, 1)
	onError := func(err error) {
		if inside.Add(1) > 1 {
			overlap = true
		}
		mu.Lock()
		reported = append(reported, err)
		n := len(reported)
		mu.Unlock()
		if n == 1 {
			close(firstIn)
			select { // the file's report comes in now, unless it waits its turn
			case <-secondIn:
			case <-time.After(time.Second):
			}
		} else {
			select {
			case secondIn <- struct{}{}:
			default:
			}
		}
		inside.Add(-1)
	}
	lb, err := balancer.NewSmoothWRR(nil)
	require.NoError(t, err)
	w, err := upstream.WatchFile(context.Background(), path, "back", lb, every, discovery.Config{Wait: wait, OnError: onError})
	require.NoError(t, err)
	step := func() { // one read of the file, and back waiting
		fileGo <- struct{}{}
		select {
		case <-fileReady:
		case <-time.After(10 * time.Second):
			t.Fatal("the file was not read")
		}
	}
	<-fileReady

	z.fail("api.test", dns.RcodeServerFailure)
	require.NoError(t, os.WriteFile(path, []byte("upstream back {\n server x weight=0;\n}\n"), 0o644))
	blockGo <- struct{}{} // the block's lookup fails: one report
	select {
	case <-firstIn:
	case <-time.After(10 * time.Second):
		t.Fatal("the failed lookup was not reported")
	}
	step() // the file does not parse: another
	mu.Lock()
	assert.Len(t, reported, 2)
	mu.Unlock()
	assert.False(t, overlap, "OnError called while it ran")

	// A changed block whose first lookup fails: reported once (and the
	// running block's, followed again, fails too).
	require.NoError(t, os.WriteFile(path, conf("gone.test"), 0o644))
	step()
	require.NoError(t, w.Close())
	mu.Lock()
	defer mu.Unlock()
	gone := 0
	for _, err := range reported {
		if strings.Contains(err.Error(), "gone.test") {
			gone++
			assert.ErrorIs(t, err, discovery.ErrNoAddresses)
		}
	}
	assert.Equal(t, 1, gone, "%v", reported)
}

// TestWatchFile_onErrorCallsBack: c.OnError may ask the FileWatcher how it
// is doing (Reloads) while a changed block's first lookup fails, which
// deadlocked while the reload held the FileWatcher's lock.
func TestWatchFile_onErrorCallsBack(t *testing.T) {
	z := newZone(t)
	z.set(t, "api.test. 30 IN A 127.0.0.2")
	path := filepath.Join(t.TempDir(), "up.conf")
	conf := func(name string) []byte {
		return []byte(fmt.Sprintf("upstream back {\n zone back 64k;\n resolver %s;\n server %s:80 resolve;\n}\n", z.addr, name))
	}
	require.NoError(t, os.WriteFile(path, conf("api.test"), 0o644))
	const every = 7 * time.Millisecond
	fileGo, fileReady := make(chan struct{}), make(chan struct{})
	wait := func(ctx context.Context, d time.Duration) error {
		if d == every {
			select {
			case fileReady <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case <-fileGo:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		<-ctx.Done()
		return ctx.Err()
	}
	var fw atomic.Pointer[upstream.FileWatcher]
	var calls atomic.Int32
	onError := func(error) {
		calls.Add(1)
		if w := fw.Load(); w != nil {
			w.Reloads()
		}
	}
	lb, err := balancer.NewSmoothWRR(nil)
	require.NoError(t, err)
	w, err := upstream.WatchFile(context.Background(), path, "back", lb, every, discovery.Config{Wait: wait, OnError: onError})
	require.NoError(t, err)
	fw.Store(w)
	<-fileReady
	require.NoError(t, os.WriteFile(path, conf("gone.test"), 0o644))
	fileGo <- struct{}{}
	select {
	case <-fileReady:
	case <-time.After(10 * time.Second):
		t.Fatal("the reload did not end: OnError calling Reloads deadlocked")
	}
	assert.Positive(t, calls.Load())
	assert.Equal(t, []string{"127.0.0.2:80"}, func() (out []string) {
		for _, p := range lb.Peers() {
			out = append(out, p.Addr())
		}
		return out
	}())
	require.NoError(t, w.Close())
}
