//go:build linux

package balancerhttp_test

import (
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// fullBacklog returns the address of a loopback listener that accepts
// nothing and whose accept queue is full: the kernel drops the SYN of any
// further connection, so a connect to it hangs, as to an overloaded or
// firewalled backend.
func fullBacklog(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0)) // a queue of one
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	addr := netip.AddrPortFrom(netip.AddrFrom4(sa.(*syscall.SockaddrInet4).Addr), uint16(sa.(*syscall.SockaddrInet4).Port)).String()
	// Fill the queue until a connect no longer completes.
	for i := 0; ; i++ {
		require.Less(t, i, 16, "the accept queue of %s does not fill", addr)
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
	}
	return addr
}

// TestConnectTimeout: a backend that does not accept the connection within
// ConnectTimeout fails the attempt, as nginx's proxy_connect_timeout, and
// since it never saw the request even a POST goes on to the next backend
// with its body; the peer is reported failed. Through the Transport and
// the Proxy.
func TestConnectTimeout(t *testing.T) {
	for _, way := range bothWays {
		t.Run(way.name, func(t *testing.T) {
			stuck := fullBacklog(t)
			ok := newBackend(t, "ok")
			p, err := balancer.NewSmoothWRR([]*balancer.Peer{balancer.NewPeer(stuck), balancer.NewPeer(ok.addr)})
			require.NoError(t, err)
			tl := newTally(p)
			client, url := way.client(t, tl, timeouts{connect: 250 * time.Millisecond}, 5*time.Second)
			req := newRequest(t, "POST", url, "payload", nil, "connect")
			resp, err := client.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			got, _ := ok.bodies.Load("connect")
			assert.Equal(t, "payload", got, "the next backend got the whole body")
			_, dones, failed := tl.snapshot()
			assert.Equal(t, map[string]int{stuck: 1, ok.addr: 1}, dones, "attempts reported")
			assert.Equal(t, map[string]int{stuck: 1}, failed, "the connect timeout is the peer's failure")
		})
	}
}

// TestConnectTimeout_error: with no other peer, the error says it was the
// connect that timed out, for errors.Is.
func TestConnectTimeout_error(t *testing.T) {
	stuck := fullBacklog(t)
	p, err := balancer.NewSmoothWRR([]*balancer.Peer{balancer.NewPeer(stuck)})
	require.NoError(t, err)
	tr := &balancerhttp.Transport{Picker: p, ConnectTimeout: 250 * time.Millisecond}
	defer tr.CloseIdleConnections()
	_, err = (&http.Client{Timeout: 5 * time.Second, Transport: tr}).Get("http://backends/")
	require.Error(t, err)
	assert.ErrorIs(t, err, balancerhttp.ErrConnectTimeout)
	assert.Contains(t, err.Error(), stuck+": balancerhttp: timed out connecting to the peer (ConnectTimeout 250ms)")
}
