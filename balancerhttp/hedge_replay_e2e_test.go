package balancerhttp_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// payload is n bytes from a seeded source, so that a truncated, reordered
// or mixed copy differs.
func payload(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 0))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestTransport_hedgeReplaysBody: a request with a body is hedged only
// when net/http would replay it: an idempotency key, and GetBody to send
// the body again. Two servers, whose first arrival of each request stalls
// (its read of the body done) until its client goes or the test releases
// it; the hedge's delay ends at that arrival. A POST with both is hedged:
// two arrivals, both of which read the full body, identical to the one
// sent; the answer is the hedge's, and the stalled server saw its
// context end. A POST lacking either is never hedged: the delay is never
// asked for, one arrival, answered once released.
func TestTransport_hedgeReplaysBody(t *testing.T) {
	sent := payload(256<<10, 28) // beyond one read of the servers' buffers
	for _, tt := range []struct {
		name    string
		key     bool
		getBody bool
		hedged  bool
	}{
		{"key and GetBody", true, true, true},
		{"GetBody without a key", false, true, false},
		{"a key without GetBody", true, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newStallFleet(t, 2, func(rank int) bool { return rank == 0 }, nil)
			lb, err := balancer.NewRoundRobin(f.peers, balancer.WithRand(rand.NewPCG(1, 2)))
			require.NoError(t, err)
			h := f.hedging(t)
			tr := &balancerhttp.Transport{Picker: lb, Hedging: h}
			defer tr.CloseIdleConnections()

			req, err := http.NewRequest(http.MethodPost, "http://svc/upload", bytes.NewReader(sent))
			require.NoError(t, err)
			req.Header.Set("X-Request-Id", "1")
			if tt.key {
				req.Header.Set("Idempotency-Key", "k1")
			}
			if !tt.getBody {
				req.GetBody = nil
			}
			if !tt.hedged {
				go func() {
					select {
					case <-f.held: // the first attempt's server has it: let it answer
						f.releaseAll()
					case <-t.Context().Done():
					}
				}()
			}
			resp, rerr := doWithin(t, tr, req)
			require.NoError(t, rerr)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			if tt.hedged {
				f.waitEnded(t, 1) // the stalled first attempt, cancelled
			}

			log := f.arrivals()
			if tt.hedged {
				require.Len(t, log, 2, "the first attempt and the hedge")
				assert.NotEqual(t, log[0].server, log[1].server, "the hedge on the other server")
				assert.True(t, log[0].cancelled, "the stalled first attempt's context ended")
				assert.Equal(t, fmt.Sprintf("%d 1", log[1].server), string(b), "the hedge's answer")
				assert.Equal(t, uint64(1), h.Stats().Won)
			} else {
				require.Len(t, log, 1, "not hedged")
				assert.Equal(t, fmt.Sprintf("%d 1", log[0].server), string(b))
				assert.Zero(t, f.timers.Load(), "the hedge's delay asked for")
				assert.Zero(t, h.Stats().Sent)
			}
			for i, a := range log {
				assert.True(t, bytes.Equal(sent, a.body), "arrival %d read %d bytes, not the %d sent", i, len(a.body), len(sent))
			}
			for _, q := range lb.Peers() {
				assert.Zero(t, q.InFlight(), "in flight on %s", q)
				assert.Zero(t, q.Stats().Failures, "failures of %s", q)
			}
		})
	}
}

// bodyCloses is a Base that counts the response bodies it hands out and
// how many of them were closed.
type bodyCloses struct {
	base           http.RoundTripper
	mu             sync.Mutex
	opened, closed int
}

func (c *bodyCloses) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		c.mu.Lock()
		c.opened++
		c.mu.Unlock()
		resp.Body = &countedBody{ReadCloser: resp.Body, c: c}
	}
	return resp, err
}

func (c *bodyCloses) counts() (opened, closed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opened, c.closed
}

type countedBody struct {
	io.ReadCloser
	c    *bodyCloses
	once sync.Once
}

func (b *countedBody) Close() error {
	b.once.Do(func() {
		b.c.mu.Lock()
		b.c.closed++
		b.c.mu.Unlock()
	})
	return b.ReadCloser.Close()
}

// heldPair is a Base that holds each response it gets until it holds two
// (or the attempt's context ends), telling first when it holds the first:
// the hedge's delay ends then, and both attempts return a response at once.
type heldPair struct {
	base  http.RoundTripper
	first chan<- time.Time
	mu    sync.Mutex
	n     int
	both  chan struct{}
}

func (h *heldPair) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.n++
	switch h.n {
	case 1:
		h.first <- time.Time{}
	case 2:
		close(h.both)
	}
	h.mu.Unlock()
	select {
	case <-h.both:
	case <-r.Context().Done():
	}
	return resp, nil
}

// TestTransport_hedgeWinnerBodyIntact: a hedged GET's winner's body, 1 MiB
// written in 64 KiB flushes, reads intact to its end after RoundTrip has
// returned (the winner's context lives on while the loser's is
// cancelled), and the loser's response, if it got one, is closed. In "the
// first stalls", the first attempt's server holds it until its client
// goes: the hedge wins, and the stalled server sees its context end. In
// "both answer", the Base holds each response until it has both, so that
// both attempts return a response at once: either may win, the body read
// is the winner's own in full, and the loser's is closed by the Transport
// (the Base counts two responses and two closes). No peer is left in
// flight or counted failed.
func TestTransport_hedgeWinnerBodyIntact(t *testing.T) {
	const size, chunk = 1 << 20, 64 << 10
	bodyOf := func(server int) []byte { return payload(size, uint64(100+server)) }
	reply := func(w http.ResponseWriter, server int, _ string) {
		b := bodyOf(server)
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		for len(b) > 0 {
			n := min(chunk, len(b))
			if _, err := w.Write(b[:n]); err != nil {
				return // the client closed it
			}
			w.(http.Flusher).Flush()
			b = b[n:]
		}
	}
	for _, tt := range []struct {
		name      string
		both      bool // both answer; else the first stalls
		responses int  // the Base hands out
	}{
		{"the first stalls", false, 1},
		{"both answer", true, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newStallFleet(t, 2, func(rank int) bool { return rank == 0 && !tt.both }, reply)
			lb, err := balancer.NewRoundRobin(f.peers, balancer.WithRand(rand.NewPCG(3, 4)))
			require.NoError(t, err)
			h := f.hedging(t)
			counter := &bodyCloses{base: http.DefaultTransport.(*http.Transport).Clone()}
			var base http.RoundTripper = counter
			if tt.both {
				base = &heldPair{base: counter, first: f.arrived, both: make(chan struct{})}
			}
			tr := &balancerhttp.Transport{Picker: lb, Hedging: h, Base: base}
			defer tr.CloseIdleConnections()

			req, err := http.NewRequest(http.MethodGet, "http://svc/big", nil)
			require.NoError(t, err)
			req.Header.Set("X-Request-Id", "1")
			resp, err := doWithin(t, tr, req)
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())

			log := f.arrivals()
			require.Len(t, log, 2, "the first attempt and the hedge")
			winner := log[1].server // the hedge's
			if tt.both {
				if !bytes.Equal(got, bodyOf(winner)) {
					winner = log[0].server
				}
			} else {
				f.waitEnded(t, 1)
				assert.True(t, f.arrivals()[0].cancelled, "the stalled first attempt's context ended")
			}
			assert.True(t, bytes.Equal(bodyOf(winner), got), "the winner's body: %d bytes, not its %d", len(got), size)
			opened, closed := counter.counts()
			assert.Equal(t, tt.responses, opened, "responses the Base handed out")
			assert.Equal(t, opened, closed, "every response the Base handed out, closed")
			assert.Equal(t, uint64(1), h.Stats().Sent)
			for _, q := range lb.Peers() {
				assert.Zero(t, q.InFlight(), "in flight on %s", q)
				assert.Zero(t, q.Stats().Failures, "failures of %s", q)
			}
		})
	}
}
