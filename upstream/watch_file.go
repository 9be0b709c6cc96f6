package upstream

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/discovery"
)

// FileWatcher keeps a balancer's peers those of an upstream block in a
// file that may change, as nginx -s reload rereads its configuration; see
// WatchFile. Its methods are safe for concurrent use.
type FileWatcher struct {
	path, name string
	bal        balancer.Updater
	c          discovery.Config
	every      time.Duration
	cancel     context.CancelFunc
	done       chan struct{}
	once       sync.Once

	mu      sync.Mutex
	src     []byte             // the text in force
	running *Block             // the block in force
	block   *discovery.Watcher // its Watcher; nil while none runs
	reloads int
	lastErr error
}

// WatchFile reads the upstream block called name ("" for the only one) in
// the file at path, keeps bal's peers its servers (following its resolve
// servers, as Block.Watch does, with c), and reads the file again every
// `every` (1s if 0): a changed text that parses replaces the list, the
// peers of the addresses it keeps keeping their state (failures, attempts
// in flight, statistics), as a reload keeps nginx's zone; one that does
// not parse, or whose resolve servers answer nothing, leaves the running
// list in force and is reported to c.OnError (with its file:line) and by
// Reloads; so is a file above 16 MiB. c.OnError is called from the file's
// goroutine and the block's Watcher, never two calls at once, and once for
// each failure. A first read that fails is WatchFile's error. Close stops
// it.
func WatchFile(ctx context.Context, path, name string, bal balancer.Updater, every time.Duration, c discovery.Config) (*FileWatcher, error) {
	if every == 0 {
		every = time.Second
	}
	if every < 0 {
		return nil, fmt.Errorf("upstream: WatchFile: interval %v: negative: %w", every, balancer.ErrInvalidConfig)
	}
	wait := c.Wait
	if wait == nil {
		wait = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if onError := c.OnError; onError != nil {
		// The file's goroutine and the block's Watcher both report: one
		// at a time, so that OnError needs no lock of its own.
		var mu sync.Mutex
		c.OnError = func(err error) {
			mu.Lock()
			defer mu.Unlock()
			onError(err)
		}
	}
	w := &FileWatcher{path: path, name: name, bal: bal, c: c, every: every, done: make(chan struct{})}
	if err, _ := w.reload(ctx); err != nil {
		return nil, err
	}
	ctx, w.cancel = context.WithCancel(ctx)
	go func() {
		defer close(w.done)
		for wait(ctx, every) == nil {
			if err, reported := w.reload(ctx); err != nil && !reported && ctx.Err() == nil && c.OnError != nil {
				c.OnError(err)
			}
		}
	}()
	return w, nil
}

// maxFileSize bounds the file WatchFile reads, every interval: a file that
// grows without end (a log written to it by mistake, a link to /dev/zero)
// would otherwise take all memory.
var maxFileSize int64 = 16 << 20

// readFile reads the file at path, refusing one above maxFileSize.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err == nil && int64(len(src)) > maxFileSize {
		err = fmt.Errorf("upstream: %s: larger than %d bytes: %w", path, maxFileSize, balancer.ErrInvalidConfig)
	}
	return src, err
}

// reload reads the file and, if its text changed, applies its block. An
// error is reported already where the block's first lookup failed (the
// Watcher reports it).
//
// One goroutine at a time reloads (WatchFile, then its goroutine), the
// only one to write src, running and block; w.mu guards what Reloads and
// Close read, and is not held across the lookups, whose failures c.OnError
// hears (and may call Reloads).
func (w *FileWatcher) reload(ctx context.Context) (err error, reported bool) {
	src, err := readFile(w.path)
	if err == nil && w.block != nil && bytes.Equal(src, w.src) {
		return nil, false
	}
	var b *Block
	if err == nil {
		b, err = ParseNamed(w.path, src, w.name)
	}
	if err != nil {
		w.setErr(err)
		return err, false
	}
	// The running block's Watcher stops first, so that none of its
	// lookups lands after the new list; if the new block's first lookup
	// fails, the old block is followed again.
	if w.block != nil {
		w.block.Close()
	}
	w.mu.Lock()
	w.block = nil
	w.mu.Unlock()
	c := w.c
	var told atomic.Bool // the Watcher reported its first lookup's failure
	if onError := c.OnError; onError != nil {
		c.OnError = func(err error) {
			told.Store(true)
			onError(err)
		}
	}
	next, err := b.Watch(ctx, w.bal, c)
	if err != nil {
		reported := told.Load()
		var again *discovery.Watcher
		if w.running != nil {
			again, _ = w.running.Watch(ctx, w.bal, w.c)
		}
		w.mu.Lock()
		w.block, w.lastErr = again, err
		w.mu.Unlock()
		return err, reported
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running != nil {
		w.reloads++
	}
	w.block, w.running, w.src, w.lastErr = next, b, src, nil
	return nil, false
}

func (w *FileWatcher) setErr(err error) {
	w.mu.Lock()
	w.lastErr = err
	w.mu.Unlock()
}

// Reloads returns how many changed texts have replaced the list since the
// first, and the last read's error (nil once a read succeeds).
func (w *FileWatcher) Reloads() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reloads, w.lastErr
}

// Close stops reading the file and following its names. The balancer
// keeps its last list.
func (w *FileWatcher) Close() error {
	w.once.Do(w.cancel)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.block != nil {
		return w.block.Close()
	}
	return nil
}
