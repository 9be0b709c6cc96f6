package upstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/discovery"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParse_resolve reads nginx 1.27.3's run-time resolution: the resolve
// and service= parameters, the zone, and the resolver of the block or of
// the http context around it (read after the block too, as nginx merges
// the context once it is read), resolver_timeout 30s by default.
func TestParse_resolve(t *testing.T) {
	src := `http {
	upstream back {
		zone back 64k;
		resolver 127.0.0.53 10.0.0.2:5353 valid=30s ipv6=off;
		resolver_timeout 5s;
		server api.internal:8080 resolve max_fails=3;
		server example.internal service=http resolve weight=2;
		server 10.0.0.9:80 backup;
	}
	upstream inherits {
		zone z;
		server api.internal resolve;
	}
	resolver 192.0.2.1;
}`
	blocks, err := ParseAll("nginx.conf", []byte(src))
	require.NoError(t, err)
	back, inh := blocks[0], blocks[1]
	assert.Equal(t, "back", back.Zone)
	assert.Equal(t, []string{"127.0.0.53", "10.0.0.2:5353"}, back.Resolvers)
	assert.Equal(t, 30*time.Second, back.ResolverValid)
	assert.Equal(t, 5*time.Second, back.ResolverTimeout)
	assert.Equal(t, "ip4", back.ResolverNetwork, "ipv6=off")
	require.Len(t, back.Servers, 3)
	assert.True(t, back.Servers[0].Resolve)
	assert.Equal(t, "api.internal:8080", back.Servers[0].Addr)
	assert.Equal(t, 3, back.Servers[0].MaxFails)
	assert.Equal(t, "http", back.Servers[1].Service)
	assert.Equal(t, 2, back.Servers[1].Weight)
	assert.False(t, back.Servers[2].Resolve)

	assert.Equal(t, []string{"192.0.2.1"}, inh.Resolvers, "the http context's resolver, given after the block")
	assert.Equal(t, 30*time.Second, inh.ResolverTimeout, "nginx's default")
	assert.Zero(t, inh.ResolverValid)
	assert.Empty(t, inh.ResolverNetwork)

	blocks, err = ParseAll("nginx.conf", []byte("http {\n resolver 192.0.2.1 ipv4=off;\n upstream u {\n zone u;\n server a.internal resolve;\n }\n}"))
	require.NoError(t, err)
	assert.Equal(t, "ip6", blocks[0].ResolverNetwork, "the http context's ipv4=off")
}

// TestParse_resolveLiteral: resolve on an IP address or a unix socket is
// a static server, as in nginx: no zone or resolver needed, and Watch
// asks no DNS (here there is none to ask) for them.
func TestParse_resolveLiteral(t *testing.T) {
	b, err := Parse("up.conf", []byte("upstream u {\n server unix:/tmp/u.sock resolve;\n server 10.0.0.1 resolve weight=2;\n server [::1]:81 resolve;\n}"))
	require.NoError(t, err)
	lb, err := balancer.NewSmoothWRR(nil)
	require.NoError(t, err)
	w, err := b.Watch(context.Background(), lb, discovery.Config{})
	require.NoError(t, err)
	require.NoError(t, w.Close())
	var got []string
	for _, p := range lb.Peers() {
		got = append(got, fmt.Sprint(p.Addr(), " ", p.Weight()))
	}
	assert.Equal(t, []string{"unix:/tmp/u.sock 1", "10.0.0.1:80 2", "[::1]:81 1"}, got)
}

// TestParse_resolveRefused: what nginx 1.27.3 refuses, with its message
// (ngx_http_upstream_server and ngx_http_upstream_init_round_robin), at the
// line of the server, or of the block for the block's own checks.
func TestParse_resolveRefused(t *testing.T) {
	tests := []struct {
		name, src string
		line      int
		want      string
	}{
		{"service without resolve", "upstream u {\n zone u;\n resolver 10.0.0.2;\n server a.internal service=http;\n}", 4, `service upstream "a.internal" requires "resolve" parameter`},
		{"service empty", "upstream u {\n zone u;\n resolver 10.0.0.2;\n server a.internal resolve service=;\n}", 4, "service is empty"},
		{"service with a port", "upstream u {\n zone u;\n resolver 10.0.0.2;\n server a.internal:80 resolve service=http;\n}", 4, `service upstream "a.internal:80" may not have port`},
		{"service on an IPv6 address with a port", "upstream u {\n zone u;\n resolver 10.0.0.2;\n server [::1]:80 resolve service=http;\n}", 4, `service upstream "[::1]:80" may not have port`},
		{"service on an IPv6 address", "upstream u {\n zone u;\n resolver 10.0.0.2;\n server [::1] resolve service=http;\n}", 4, `service upstream "[::1]" requires domain name`},
		{"service on an address", "upstream u {\n zone u;\n resolver 10.0.0.2;\n server 10.0.0.1 resolve service=http;\n}", 4, `service upstream "10.0.0.1" requires domain name`},
		{"resolve without zone", "upstream u {\n resolver 10.0.0.2;\n server a.internal resolve;\n}", 1, `resolving names at run time requires upstream "u" in up.conf:1 to be in shared memory`},
		{"resolve without resolver", "upstream u {\n zone u;\n server a.internal resolve;\n}", 1, `no resolver defined to resolve names at run time in upstream "u" in up.conf:1`},
		{"resolver without address", "upstream u {\n zone u;\n resolver valid=10s;\n server a.internal resolve;\n}", 3, `no name servers defined in "resolver" directive`},
		{"resolver bad valid", "upstream u {\n zone u;\n resolver 10.0.0.2 valid=soon;\n server a resolve;\n}", 3, "invalid parameter: valid=soon"},
		{"resolver bad address", "upstream u {\n zone u;\n resolver 10.0.0.2:0;\n server a resolve;\n}", 3, `invalid resolver address "10.0.0.2:0"`},
		{"resolver_timeout bad", "upstream u {\n zone u;\n resolver 10.0.0.2;\n resolver_timeout x;\n server a resolve;\n}", 4, `invalid value "x" in "resolver_timeout" directive`},
		{"resolver with no family", "upstream u {\n zone u;\n resolver 10.0.0.2 ipv4=off ipv6=off;\n server a resolve;\n}", 3, `"ipv4" and "ipv6" cannot both be "off"`},
		{"zone without name", "upstream u {\n zone;\n server a;\n}", 2, `invalid number of arguments in "zone" directive`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseAll("up.conf", []byte(tt.src))
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tt.line, pe.Line)
			assert.Equal(t, tt.want, pe.Msg)
		})
	}
}
