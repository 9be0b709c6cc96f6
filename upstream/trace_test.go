package upstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

// fixed is the clock of every traced picker: nginx ran each recorded case
// within a second, far inside every fail_timeout.
var fixed = balancer.WithClock(func() time.Time { return time.Unix(1_700_000_000, 0) })

func fails(addrs ...string) func(string) bool {
	return func(a string) bool {
		for _, f := range addrs {
			if a == f {
				return true
			}
		}
		return false
	}
}

// TestTrace traces blocks whose servers have no port: nginx logs them on
// port 80.
func TestTrace(t *testing.T) {
	tests := []struct {
		name    string
		servers string // the body of `upstream back { ... }`
		failing func(string) bool
		n       int
		want    []string
	}{
		{
			// The sequence of nginx's smooth WRR commit message.
			name:    "5 1 1, all healthy",
			servers: "server a weight=5; server b; server c;",
			n:       7,
			want:    []string{"a:80", "a:80", "b:80", "a:80", "c:80", "a:80", "a:80"},
		},
		{
			// One server: nginx ignores max_fails and allows one try per
			// request, so every request logs the server alone.
			name:    "single failing server",
			servers: "server a;",
			failing: fails("a:80"),
			n:       3,
			want:    []string{"a:80", "a:80", "a:80"},
		},
		{
			// a and b tie at current weight 1; a, first, wins and fails: at
			// max_fails 1 it is out for fail_timeout, which never passes on
			// the fixed clock. The retry skips the tried a and takes b.
			name:    "failing primary",
			servers: "server a; server b;",
			failing: fails("a:80"),
			n:       3,
			want:    []string{"a:80, b:80", "b:80", "b:80"},
		},
		{
			name:    "failing primary, backup takes over",
			servers: "server a; server b backup;",
			failing: fails("a:80"),
			n:       2,
			want:    []string{"a:80, b:80", "b:80"},
		},
		{
			// Request 1 uses both of its two tries. Request 2 finds a and
			// then the backup b in their fail windows: no live upstream.
			name:    "everything fails",
			servers: "server a; server b backup;",
			failing: fails("a:80", "b:80"),
			n:       2,
			want:    []string{"a:80, b:80", "back"},
		},
		{
			// nginx always asks for a first peer and logs the upstream's
			// name when none is live.
			name:    "every server down",
			servers: "server a down; server b down;",
			n:       2,
			want:    []string{"back", "back"},
		},
		{
			name:    "single server down",
			servers: "server a down;",
			n:       1,
			want:    []string{"back"},
		},
		{
			// max_fails=0: a is never taken out and its weight never drops.
			// Current weights (a, b): [1,1] a wins -> [-1,1]; a fails, the
			// retry sees b only: b 2 -> 1. Next: [0,2] b wins -> [0,0].
			// Then [1,1] again: a period of two requests.
			name:    "max_fails=0 keeps a failing server in rotation",
			servers: "server a max_fails=0; server b;",
			failing: fails("a:80"),
			n:       4,
			want:    []string{"a:80, b:80", "b:80", "a:80, b:80", "b:80"},
		},
		{
			name:    "no requests",
			servers: "server a;",
			n:       0,
			want:    []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Parse("up.conf", []byte("upstream back { "+tt.servers+" }"))
			require.NoError(t, err)
			p, err := balancer.NewSmoothWRR(b.Peers(), fixed)
			require.NoError(t, err)
			got, err := Trace(p, b.Name, tt.n, tt.failing)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// stubPicker returns peer from every Pick, or pickErr, and doneErr from
// every Done, whatever the request's state.
type stubPicker struct {
	peer             *balancer.Peer
	pickErr, doneErr error
}

func (s stubPicker) Pick(*balancer.Request) (*balancer.Peer, error) {
	if s.pickErr != nil {
		return nil, s.pickErr
	}
	return s.peer, nil
}

func (s stubPicker) Done(*balancer.Peer, balancer.Outcome) error { return s.doneErr }

func TestTraceErrors(t *testing.T) {
	a := balancer.NewPeer("a")
	tests := []struct {
		name    string
		p       balancer.Picker
		failing func(string) bool
		want    error
	}{
		{"pick error", stubPicker{pickErr: balancer.ErrNoPeers}, nil, balancer.ErrNoPeers},
		{"done error", stubPicker{peer: a, doneErr: balancer.ErrNotInFlight}, nil, balancer.ErrNotInFlight},
		{"endless retries", stubPicker{peer: a}, fails("a"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines, err := Trace(tt.p, "back", 3, tt.failing)
			require.Error(t, err)
			assert.Empty(t, lines)
			if tt.want == nil {
				assert.Contains(t, err.Error(), "more than 65536 attempts")
				return
			}
			assert.ErrorIs(t, err, tt.want)
		})
	}
}

// TestTraceEach checks that prepare sees each request once, in order,
// before its first attempt, retries included.
func TestTraceEach(t *testing.T) {
	b, err := Parse("up.conf", []byte("upstream back { server a; server b; }"))
	require.NoError(t, err)
	p, err := balancer.NewSmoothWRR(b.Peers(), fixed)
	require.NoError(t, err)
	var seen []int
	prepare := func(i int, r *balancer.Request) {
		assert.Equal(t, 0, r.Attempts(), "request %d is fresh", i)
		seen = append(seen, i)
	}
	got, err := TraceEach(p, b.Name, 3, fails("a:80"), prepare)
	require.NoError(t, err)
	assert.Equal(t, []string{"a:80, b:80", "b:80", "b:80"}, got)
	assert.Equal(t, []int{0, 1, 2}, seen)
}
