package upstream

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/discovery"
)

// fileSteps is a discovery.Config.Wait that lets the file's reads through
// one at a time, when the test says (waits of `every`), and holds the
// block watchers' waits until they stop.
type fileSteps struct {
	every time.Duration
	next  chan struct{}
	ready chan struct{}
}

func (f *fileSteps) wait(ctx context.Context, d time.Duration) error {
	if d != f.every {
		<-ctx.Done()
		return ctx.Err()
	}
	select {
	case f.ready <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-f.next:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// step lets one read of the file through and waits until it is done (the
// loop is back waiting).
func (f *fileSteps) step(t *testing.T) {
	t.Helper()
	f.next <- struct{}{}
	select {
	case <-f.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the file was not read")
	}
}

func addrs(b interface{ Peers() []*balancer.Peer }) []string {
	var out []string
	for _, p := range b.Peers() {
		out = append(out, p.Addr())
	}
	return out
}

// TestWatchFile: a change of the file replaces the list as a reload does,
// a kept address keeping its peer and its attempt in flight; a text that
// does not parse leaves the list and is reported with its file:line; the
// text fixed is applied.
func TestWatchFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "upstream.conf")
	write := func(s string) { require.NoError(t, os.WriteFile(path, []byte(s), 0o644)) }
	write("upstream back {\n server 10.0.0.1:80;\n server 10.0.0.2:80 weight=2;\n}\n")
	lb, err := balancer.NewSmoothWRR(nil)
	require.NoError(t, err)
	steps := &fileSteps{every: 7 * time.Millisecond, next: make(chan struct{}), ready: make(chan struct{})}
	var reported []error
	w, err := WatchFile(context.Background(), path, "back", lb, steps.every, discovery.Config{
		Wait:    steps.wait,
		OnError: func(err error) { reported = append(reported, err) },
	})
	require.NoError(t, err)
	<-steps.ready
	assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80"}, addrs(lb))

	var r balancer.Request
	held, err := lb.Pick(&r)
	require.NoError(t, err)
	write("upstream back {\n server 10.0.0.2:80 weight=2;\n server 10.0.0.1:80 max_fails=0;\n server 10.0.0.3:80;\n}\n")
	steps.step(t)
	assert.Equal(t, []string{"10.0.0.2:80", "10.0.0.1:80", "10.0.0.3:80"}, addrs(lb))
	for _, p := range lb.Peers() {
		if p.Addr() == held.Addr() {
			assert.Same(t, held, p)
			assert.Equal(t, 1, p.InFlight())
		}
	}
	require.NoError(t, lb.Done(held, balancer.Outcome{}))
	assert.Equal(t, 0, lb.Peers()[1].MaxFails(), "the new parameters")

	write("upstream back {\n server 10.0.0.4:80 weight=x;\n}\n")
	steps.step(t)
	assert.Equal(t, []string{"10.0.0.2:80", "10.0.0.1:80", "10.0.0.3:80"}, addrs(lb), "a bad file leaves the list")
	require.Len(t, reported, 1)
	var pe *ParseError
	require.ErrorAs(t, reported[0], &pe)
	assert.Equal(t, path, pe.File)
	assert.Equal(t, 2, pe.Line)
	n, lastErr := w.Reloads()
	assert.Equal(t, 1, n)
	assert.ErrorIs(t, lastErr, ErrInvalidParam)

	steps.step(t) // the same bad text: reported again, nothing changes
	assert.Len(t, reported, 2)

	write("upstream back {\n server 10.0.0.4:80;\n}\n")
	steps.step(t)
	assert.Equal(t, []string{"10.0.0.4:80"}, addrs(lb))
	n, lastErr = w.Reloads()
	assert.Equal(t, 2, n)
	assert.NoError(t, lastErr)

	require.NoError(t, os.Remove(path))
	steps.step(t)
	assert.Equal(t, []string{"10.0.0.4:80"}, addrs(lb), "a missing file leaves the list")
	assert.True(t, errors.Is(reported[len(reported)-1], os.ErrNotExist))
	require.NoError(t, w.Close())
}

// TestWatchFile_firstRead: a first read that fails is the error, and the
// balancer is left as it was.
func TestWatchFile_firstRead(t *testing.T) {
	lb, err := balancer.NewSmoothWRR([]*balancer.Peer{balancer.NewPeer("10.9.9.9:80")})
	require.NoError(t, err)
	dir := t.TempDir()
	_, err = WatchFile(context.Background(), filepath.Join(dir, "none.conf"), "", lb, time.Second, discovery.Config{})
	assert.ErrorIs(t, err, os.ErrNotExist)
	bad := filepath.Join(dir, "bad.conf")
	require.NoError(t, os.WriteFile(bad, []byte("upstream a { server 10.0.0.1:80; }\nupstream b { server 10.0.0.2:80; }\n"), 0o644))
	_, err = WatchFile(context.Background(), bad, "", lb, time.Second, discovery.Config{})
	assert.ErrorIs(t, err, ErrManyUpstreams)
	_, err = WatchFile(context.Background(), bad, "c", lb, time.Second, discovery.Config{})
	assert.ErrorIs(t, err, ErrNoUpstream)
	_, err = WatchFile(context.Background(), bad, "a", lb, -time.Second, discovery.Config{})
	assert.ErrorIs(t, err, balancer.ErrInvalidConfig)
	assert.Equal(t, []string{"10.9.9.9:80"}, addrs(lb))
}

// TestWatchFile_huge: a file that grows past the bound (here lowered), or
// a link to an endless file, is refused rather than read into memory
// whole: the running list stays and the refusal is reported.
func TestWatchFile_huge(t *testing.T) {
	defer func(n int64) { maxFileSize = n }(maxFileSize)
	maxFileSize = 1 << 10
	dir := t.TempDir()
	path := filepath.Join(dir, "upstream.conf")
	text := "upstream back {\n server 10.0.0.1:80;\n}\n"
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	lb, err := balancer.NewSmoothWRR(nil)
	require.NoError(t, err)
	steps := &fileSteps{every: 7 * time.Millisecond, next: make(chan struct{}), ready: make(chan struct{})}
	var reported []error
	w, err := WatchFile(context.Background(), path, "", lb, steps.every, discovery.Config{
		Wait:    steps.wait,
		OnError: func(err error) { reported = append(reported, err) },
	})
	require.NoError(t, err)
	<-steps.ready
	require.NoError(t, os.WriteFile(path, []byte(text+strings.Repeat("# padding\n", 200)), 0o644))
	steps.step(t)
	assert.Equal(t, []string{"10.0.0.1:80"}, addrs(lb))
	require.Len(t, reported, 1)
	assert.Contains(t, reported[0].Error(), "larger than 1024 bytes")
	require.NoError(t, w.Close())

	if _, err := os.Stat("/dev/zero"); err == nil {
		zero := filepath.Join(dir, "zero.conf")
		require.NoError(t, os.Symlink("/dev/zero", zero))
		_, err = WatchFile(context.Background(), zero, "", lb, time.Second, discovery.Config{})
		assert.ErrorContains(t, err, "larger than 1024 bytes")
	}
}
