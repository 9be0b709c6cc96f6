package balancer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is a Picker that records every outcome reported to it.
type recorder struct {
	Picker
	got []string
}

func (r *recorder) Done(p *Peer, o Outcome) error {
	kind := "ok"
	switch {
	case o.Failed:
		kind = "failed"
	case o.Superseded:
		kind = "superseded"
	case o.Abandoned:
		kind = "abandoned"
	}
	r.got = append(r.got, fmt.Sprintf("%s %s %v", p.Addr(), kind, o.Latency))
	return r.Picker.Done(p, o)
}

// step is what a fake try does on one peer: take lat on the fake clock,
// then end ctx if cancel is set, then return err.
type step struct {
	lat    time.Duration
	cancel bool
	err    error
}

type codeError struct{ code int }

func (e *codeError) Error() string { return fmt.Sprint("status ", e.code) }

func TestDo(t *testing.T) {
	errRefused := errors.New("connection refused")
	errReset := errors.New("connection reset")
	err404 := &codeError{404}
	// SmoothWRR over a (weight 3), b (2), c (1) picks a, then b, then c
	// within one request: nginx's smooth order with a retry never going
	// back to a peer tried.
	tests := []struct {
		name      string
		steps     map[string]step
		preCancel bool
		down      bool // every peer down
		want      []string
		wantErr   []error // errors.Is targets; none: nil
		wantText  string
	}{
		{"success", map[string]step{"a": {lat: 5 * time.Millisecond}}, false, false,
			[]string{"a ok 5ms"}, nil, ""},
		{"failure then success", map[string]step{"a": {lat: time.Millisecond, err: errRefused}, "b": {lat: 2 * time.Millisecond}}, false, false,
			[]string{"a failed 1ms", "b ok 2ms"}, nil, ""},
		{"every peer fails", map[string]step{
			"a": {lat: time.Millisecond, err: errRefused},
			"b": {lat: time.Millisecond, err: errRefused},
			"c": {lat: 3 * time.Millisecond, err: err404},
		}, false, false,
			[]string{"a failed 1ms", "b failed 1ms", "c failed 3ms"}, []error{ErrTriesExhausted, err404}, `last attempt on "c"`},
		{"not a failure", map[string]step{"a": {lat: 4 * time.Millisecond, err: NotFailure(err404)}}, false, false,
			[]string{"a ok 4ms"}, []error{err404}, "status 404"},
		{"context canceled during the attempt", map[string]step{"a": {lat: 9 * time.Millisecond, cancel: true, err: context.Canceled}}, false, false,
			[]string{"a abandoned 9ms"}, []error{context.Canceled}, `attempt on "a" abandoned`},
		{"context ended, try's own error", map[string]step{"a": {lat: 9 * time.Millisecond, cancel: true, err: errReset}}, false, false,
			[]string{"a abandoned 9ms"}, []error{context.Canceled, errReset}, ""},
		{"failure, then the context ends", map[string]step{
			"a": {lat: time.Millisecond, err: errRefused},
			"b": {lat: 30 * time.Millisecond, cancel: true, err: errReset},
		}, false, false,
			[]string{"a failed 1ms", "b abandoned 30ms"}, []error{context.Canceled, errReset}, ""},
		{"context ended before", map[string]step{}, true, false,
			nil, []error{context.Canceled}, ""},
		{"no live peer", map[string]step{}, false, true,
			nil, []error{ErrNoLivePeer}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			opts := []PeerOption{MaxFails(0)}
			if tt.down {
				opts = append(opts, Down())
			}
			lb, err := NewSmoothWRR([]*Peer{
				NewPeer("a", append(opts, Weight(3))...),
				NewPeer("b", append(opts, Weight(2))...),
				NewPeer("c", append(opts, Weight(1))...),
			}, clk.opt())
			require.NoError(t, err)
			rec := &recorder{Picker: lb}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.preCancel {
				cancel()
			}
			calls := 0
			err = Do(ctx, rec, nil, func(ctx context.Context, peer *Peer) error {
				calls++
				s, ok := tt.steps[peer.Addr()]
				require.True(t, ok, "unexpected attempt on %s", peer)
				assert.Equal(t, 1, peer.InFlight(), "in flight during try")
				clk.add(s.lat)
				if s.cancel {
					cancel()
				}
				return s.err
			}, clk.opt())
			assert.Equal(t, tt.want, rec.got)
			assert.Equal(t, len(tt.want), calls)
			if len(tt.wantErr) == 0 {
				assert.NoError(t, err)
			}
			for _, target := range tt.wantErr {
				assert.ErrorIs(t, err, target)
			}
			if tt.wantText != "" {
				assert.ErrorContains(t, err, tt.wantText)
			}
			for _, q := range lb.Peers() {
				assert.Zero(t, q.InFlight(), "in flight on %s after Do", q)
			}
		})
	}
}

func TestDo_errorsAs(t *testing.T) {
	lb, err := NewSmoothWRR([]*Peer{NewPeer("a", MaxFails(0)), NewPeer("b", MaxFails(0))})
	require.NoError(t, err)
	err = Do(context.Background(), lb, nil, func(context.Context, *Peer) error { return &codeError{503} })
	var ce *codeError
	require.ErrorAs(t, err, &ce, "the last attempt's error")
	assert.Equal(t, 503, ce.code)
	assert.ErrorIs(t, err, ErrTriesExhausted)

	// NotFailure returns the caller's error itself.
	e := &codeError{404}
	err = Do(context.Background(), lb, nil, func(context.Context, *Peer) error { return NotFailure(e) })
	assert.Same(t, e, err)
	assert.Nil(t, NotFailure(nil))
}

func TestDo_panicReportsAbandoned(t *testing.T) {
	clk := newFakeClock()
	lb, err := NewSmoothWRR([]*Peer{NewPeer("a"), NewPeer("b")})
	require.NoError(t, err)
	rec := &recorder{Picker: lb}
	assert.PanicsWithValue(t, "boom", func() {
		_ = Do(context.Background(), rec, nil, func(context.Context, *Peer) error {
			clk.add(2 * time.Millisecond)
			panic("boom")
		}, clk.opt())
	})
	assert.Equal(t, []string{"a abandoned 2ms"}, rec.got)
	for _, q := range lb.Peers() {
		assert.Zero(t, q.InFlight())
	}
}

func TestDo_badInput(t *testing.T) {
	lb, err := NewSmoothWRR([]*Peer{NewPeer("a")})
	require.NoError(t, err)
	ok := func(context.Context, *Peer) error { return nil }
	tests := []struct {
		name string
		call func() error
	}{
		{"nil picker", func() error { return Do(context.Background(), nil, nil, ok) }},
		{"nil try", func() error { return Do(context.Background(), lb, nil, nil) }},
		{"an option Do does not use", func() error { return Do(context.Background(), lb, nil, ok, WithDecay(time.Second)) }},
		{"an events hook, which Do does not call", func() error {
			return Do(context.Background(), lb, nil, ok, WithEvents(func(Event) {}))
		}},
		{"nil clock", func() error { return Do(context.Background(), lb, nil, ok, WithClock(nil)) }},
		{"nil option", func() error { return Do(context.Background(), lb, nil, ok, nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.ErrorIs(t, tt.call(), ErrInvalidConfig)
			assert.Zero(t, lb.Peers()[0].InFlight())
		})
	}
}

// A Request passed in carries the key and counts the attempts.
func TestDo_request(t *testing.T) {
	peers := []*Peer{NewPeer("a", MaxFails(0)), NewPeer("b", MaxFails(0)), NewPeer("c", MaxFails(0))}
	lb, err := NewHash(peers)
	require.NoError(t, err)
	var r Request
	r.SetKey("user-42")
	first := mustPick(t, lb, &r)
	require.NoError(t, lb.Done(first, Outcome{}))
	r.Reset()
	r.SetKey("user-42")
	var tried []*Peer
	err = Do(context.Background(), lb, &r, func(_ context.Context, p *Peer) error {
		tried = append(tried, p)
		return errors.New("down")
	})
	assert.ErrorIs(t, err, ErrTriesExhausted)
	require.Len(t, tried, 3)
	assert.Same(t, first, tried[0], "the key's peer first")
	assert.Equal(t, 3, r.Attempts())
}
