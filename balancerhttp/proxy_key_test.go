package balancerhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// TestProxy_key routes by Proxy.Key: each request goes to the backend that
// a second ConsistentHash over the same peers picks for its X-User header
// given as the key directly, so the Proxy handed the picker that key; and
// the twelve users reach more than one backend, so the key was not one
// constant.
func TestProxy_key(t *testing.T) {
	bs := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	peers := func() []*balancer.Peer {
		var ps []*balancer.Peer
		for _, b := range bs {
			ps = append(ps, balancer.NewPeer(b.addr))
		}
		return ps
	}
	picker, err := balancer.NewConsistentHash(peers())
	require.NoError(t, err)
	want, err := balancer.NewConsistentHash(peers())
	require.NoError(t, err)
	byAddr := map[string]string{}
	for _, b := range bs {
		byAddr[b.addr] = b.name
	}
	proxy := httptest.NewServer(&balancerhttp.Proxy{
		Picker: picker,
		Key:    func(r *http.Request) string { return r.Header.Get("X-User") },
	})
	defer proxy.Close()

	reached := map[string]bool{}
	for i := range 12 {
		user := fmt.Sprint("user-", i)
		var r balancer.Request
		r.SetKey(user)
		p, err := want.Pick(&r)
		require.NoError(t, err)
		require.NoError(t, want.Done(p, balancer.Outcome{}))
		for range 3 {
			req, err := http.NewRequest(http.MethodGet, proxy.URL, nil)
			require.NoError(t, err)
			req.Header.Set("X-User", user)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			assert.Equal(t, byAddr[p.Addr()], string(body), "user %s", user)
			reached[string(body)] = true
		}
	}
	assert.Greater(t, len(reached), 1, "every user on one backend: the key did not reach the picker")
}
