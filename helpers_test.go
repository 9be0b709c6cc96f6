package balancer

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is the tests' clock: it moves only when a test moves it, and
// goroutines may read and move it at once. It counts its reads.
type fakeClock struct{ ns, reads atomic.Int64 }

// newFakeClock returns a fakeClock at 100 s past the Unix epoch.
func newFakeClock() *fakeClock { return newFakeClockAt(time.Unix(100, 0)) }

// newFakeClockAt returns a fakeClock at t.
func newFakeClockAt(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *fakeClock) now() time.Time {
	c.reads.Add(1)
	return time.Unix(0, c.ns.Load())
}

func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }

func (c *fakeClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// opt is the option that makes a picker read c.
func (c *fakeClock) opt() Option { return WithClock(c.now) }

// makePeers builds the tests' peer lists: n peers, peer i named name(i)
// and built with opts(i) (none when opts is nil). The names are the ones
// the tests' expected values were worked out with.
func makePeers(n int, name func(i int) string, opts func(i int) []PeerOption) []*Peer {
	ps := make([]*Peer, n)
	for i := range ps {
		var o []PeerOption
		if opts != nil {
			o = opts(i)
		}
		ps[i] = NewPeer(name(i), o...)
	}
	return ps
}

// letter names peer i a, b, c...
func letter(i int) string { return string(rune('a' + i)) }

// numbered names peer i p0, p1, p2...
func numbered(i int) string { return "p" + strconv.Itoa(i) }

// ipAddr names peer i 10.x.y.z:80, x.y.z being i's three low bytes.
func ipAddr(i int) string { return fmt.Sprintf("10.%d.%d.%d:80", i>>16&255, i>>8&255, i&255) }

// weightsOf gives peer i the weight ws[i].
func weightsOf(ws []int) func(i int) []PeerOption {
	return func(i int) []PeerOption { return []PeerOption{Weight(ws[i])} }
}

// weighted returns peers named a, b, c... with the given weights.
func weighted(ws ...int) []*Peer { return makePeers(len(ws), letter, weightsOf(ws)) }

// numberedWeighted returns peers named p0, p1, ... with the given weights.
func numberedWeighted(ws ...int) []*Peer { return makePeers(len(ws), numbered, weightsOf(ws)) }

// named returns peers named a, b, c... each built with opts[i].
func named(opts ...[]PeerOption) []*Peer {
	return makePeers(len(opts), letter, func(i int) []PeerOption { return opts[i] })
}

// addrPeers returns n peers at ipAddr(from), ipAddr(from+1), ..., each
// built with opts.
func addrPeers(n, from int, opts ...PeerOption) []*Peer {
	return makePeers(n, func(i int) string { return ipAddr(from + i) }, func(int) []PeerOption { return opts })
}

// currentWeights returns the current weight of each peer, in order.
func currentWeights(peers []*Peer) []int {
	cw := make([]int, len(peers))
	for i, p := range peers {
		cw[i] = p.State().CurrentWeight
	}
	return cw
}

// pickHow changes how picks makes its picks; the zero value is the plain
// way: a nil Request, every pick must succeed and is reported a success.
type pickHow uint8

const (
	// pickHold reports none of the picks, so the attempts stay in flight.
	pickHold pickHow = 1 << iota
	// pickGaps lets a pick fail: it shows as "-" instead of failing the
	// test.
	pickGaps
	// pickLocked picks through the locked scan: each pick's Request has had
	// one attempt of two (a request that is not fresh never takes the
	// cycle) and, with no tried bits, it skips no peer.
	pickLocked
)

// picks returns the addresses of n picks, joined by spaces.
func picks(t *testing.T, p Picker, n int, how ...pickHow) string {
	t.Helper()
	var h pickHow
	for _, x := range how {
		h |= x
	}
	out := make([]string, n)
	var r Request
	for i := range out {
		var req *Request
		if h&pickLocked != 0 {
			r.Reset()
			r.attempts, r.limit = 1, 2
			req = &r
		}
		peer, err := p.Pick(req)
		if err != nil && h&pickGaps != 0 {
			out[i] = "-"
			continue
		}
		require.NoError(t, err)
		if h&pickHold == 0 {
			require.NoError(t, p.Done(peer, Outcome{}))
		}
		out[i] = peer.Addr()
	}
	return strings.Join(out, " ")
}

// pickerCase builds one picker type for the contract suite. Every picker in
// the package must appear here.
type pickerCase struct {
	name string
	new  func(peers []*Peer, opts ...Option) (Balancer, error)
	alg  Algorithm
}

// pickerCases is every picker of the registry (Algorithms), so a picker
// added there runs the whole contract suite.
var pickerCases = func() []pickerCase {
	var cs []pickerCase
	for _, a := range Algorithms() {
		cs = append(cs, pickerCase{a.Name, a.New, a})
	}
	return cs
}()

// forEachPicker runs f as a subtest for every picker type.
func forEachPicker(t *testing.T, f func(t *testing.T, pc pickerCase)) {
	for _, pc := range pickerCases {
		t.Run(pc.name, func(t *testing.T) { f(t, pc) })
	}
}

// mustPick picks for r and fails the test on error.
func mustPick(t *testing.T, p Picker, r *Request) *Peer {
	t.Helper()
	peer, err := p.Pick(r)
	require.NoError(t, err)
	require.NotNil(t, peer)
	return peer
}

// updater is the update API every picker implements.
type updater = Updater

func toSet(p Picker) updater { return p.(updater) }

// benchPeers returns n healthy peers weighted i%10+1, the workload every
// benchmark here and in the comparison module uses.
func benchPeers(n int) []*Peer {
	return makePeers(n, ipAddr, func(i int) []PeerOption { return []PeerOption{Weight(i%10 + 1)} })
}

// backupOf returns a peer for addr that is a backup, or a primary for a
// picker that refuses backups (nginx's hash, ip_hash and random methods).
func backupOf(pc pickerCase, addr string, opts ...PeerOption) *Peer {
	if pc.alg.NoBackups {
		return NewPeer(addr, opts...)
	}
	return NewPeer(addr, append(opts, Backup())...)
}

// attemptUpTo runs r through p as a caller with a retry budget would: up
// to tries attempts, each reported failed
// when failed is set, ending at the first success or when p refuses
// (ErrNoLivePeer, ErrTriesExhausted). Any other error fails t. check, if
// not nil, sees each picked peer before its report. Goroutines may call it
// at once: it reports with t.Error.
func attemptUpTo(t testing.TB, p Picker, r *Request, tries int, failed bool, check func(*Peer)) {
	for range tries {
		peer, err := p.Pick(r)
		if err != nil {
			if !errors.Is(err, ErrNoLivePeer) && !errors.Is(err, ErrTriesExhausted) {
				t.Error(err)
			}
			return
		}
		if check != nil {
			check(peer)
		}
		if err := p.Done(peer, Outcome{Failed: failed}); err != nil {
			t.Error(err)
		}
		if !failed {
			return
		}
	}
}

// churnList changes set's list until stop is closed, one change a turn:
// down marked down and up again, extra added and removed, weigh reweighed
// (when weigh is not nil and the picker has SetWeight), and the list
// replaced by snapshot(). It returns the first error, naming the change.
// The stress tests run it beside their picking goroutines.
func churnList(set updater, down, extra, weigh *Peer, snapshot func() []*Peer, stop <-chan struct{}) error {
	steps := []string{"SetDown", "Add", "Remove", "Update"}
	w, canWeigh := set.(interface{ SetWeight(*Peer, int) error })
	if weigh != nil && canWeigh {
		steps = append(steps, "SetWeight")
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		var err error
		switch step := steps[i%len(steps)]; step {
		case "SetDown":
			err = set.SetDown(down, i/len(steps)%2 == 0)
		case "Add":
			err = set.Add(extra)
		case "Remove":
			err = set.Remove(extra)
		case "Update":
			err = set.Update(snapshot())
		case "SetWeight":
			err = w.SetWeight(weigh, 1+i%3)
		}
		if err != nil {
			return fmt.Errorf("%s (turn %d): %w", steps[i%len(steps)], i, err)
		}
		runtime.Gosched() // let the pickers in between changes
	}
}

// tryRequest makes one request with r on b as a retrying caller does:
// pick, report the outcome outcome gives the peer, and again after a
// failure, until a success or no peer is left (ErrNoLivePeer or
// ErrTriesExhausted; any other error is reported through fail, as a
// refused Done is). It counts each pick in picked and each accepted report
// in reported, for the stress tests' balance of the two.
func tryRequest(b Picker, r *Request, outcome func(*Peer) Outcome, picked, reported *atomic.Int64, fail func(string, ...any)) {
	for {
		p, err := b.Pick(r)
		if err != nil {
			if !errors.Is(err, ErrNoLivePeer) && !errors.Is(err, ErrTriesExhausted) {
				fail("Pick: %v", err)
			}
			return
		}
		picked.Add(1)
		o := outcome(p)
		if err := b.Done(p, o); err != nil {
			fail("Done(%s): %v", p, err)
		} else {
			reported.Add(1)
		}
		if !o.Failed {
			return
		}
	}
}
