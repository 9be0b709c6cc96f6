package balancer

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomCluster adds to model, and returns as Peers, 1 to 6 random servers:
// weights from weight, max_fails 0 to 2, fail_timeout 1 to 5 s, and now and
// then a backup or a down server. byAddr maps each address to its Peer.
func randomCluster(rng *rand.Rand, model *ngxModel, weight func() int) (peers []*Peer, byAddr map[string]*Peer) {
	return clusterOf(rng, model, 1+rng.IntN(6), 5, 8, weight)
}

// clusterOf is randomCluster with n servers, a backup one time in
// backupOneIn (never the first) and a down server one in downOneIn. The
// servers are named a, b, ..., z, then p26, p27, ....
func clusterOf(rng *rand.Rand, model *ngxModel, n, backupOneIn, downOneIn int, weight func() int) (peers []*Peer, byAddr map[string]*Peer) {
	byAddr = map[string]*Peer{}
	for i := range n {
		w, mf, ft := weight(), rng.IntN(3), time.Duration(1+rng.IntN(5))*time.Second
		backup := i > 0 && rng.IntN(backupOneIn) == 0
		down := rng.IntN(downOneIn) == 0
		opts := []PeerOption{Weight(w), MaxFails(mf), FailTimeout(ft)}
		if backup {
			opts = append(opts, Backup())
		}
		if down {
			opts = append(opts, Down())
		}
		addr := string(rune('a' + i))
		if i >= 26 {
			addr = "p" + strconv.Itoa(i)
		}
		p := NewPeer(addr, opts...)
		peers = append(peers, p)
		byAddr[addr] = p
		model.add(addr, w, mf, int64(ft), backup, down)
	}
	return peers, byAddr
}

// requireModelState checks a peer's failures, effective weight and current
// weight against the model's peer m after step.
func requireModelState(t *testing.T, step int, m *ngxPeer, st PeerState) {
	t.Helper()
	require.Equal(t, m.fails, int64(st.Fails), "step %d peer %s fails", step, m.addr)
	require.Equal(t, m.ew, int64(st.EffectiveWeight), "step %d peer %s ew", step, m.addr)
	require.Equal(t, m.cw, int64(st.CurrentWeight), "step %d peer %s cw", step, m.addr)
}

// requestAsModel serves one request on p and on model, attempt by attempt,
// each failing with probability failProb, and checks every pick; pick and
// free are the model's selection and accounting (ngxModel's or a variant's).
func requestAsModel(t *testing.T, rng *rand.Rand, p Picker, model *ngxModel,
	pick func(int64) *ngxPeer, free func(*ngxPeer, bool, int64), failProb float64, now int64, step int) {
	t.Helper()
	var r Request
	model.begin()
	for {
		want := pick(now)
		got := pickAsModel(t, p, &r, want, model.exhausted(), step)
		if got == nil {
			return
		}
		failed := rng.Float64() < failProb
		free(want, failed, now)
		require.NoError(t, p.Done(got, Outcome{Failed: failed}))
		if !failed {
			return
		}
	}
}

// pickAsModel makes one Pick of r and checks it against the model's choice
// want (nil: the model found none, exhausted telling why). It returns the
// picked peer, nil exactly when want is nil.
func pickAsModel(t *testing.T, p Picker, r *Request, want *ngxPeer, exhausted bool, step int) *Peer {
	t.Helper()
	got, err := p.Pick(r)
	if want == nil {
		require.Error(t, err, "step %d: model found no peer", step)
		if exhausted {
			assert.ErrorIs(t, err, ErrTriesExhausted)
		} else {
			assert.ErrorIs(t, err, ErrNoLivePeer)
		}
		return nil
	}
	require.NoError(t, err, "step %d: model picked %s", step, want.addr)
	require.Equal(t, want.addr, got.Addr(), "step %d", step)
	return got
}

// ngxModel is a literal transcription of nginx 1.22.1's round-robin peer
// selection and accounting (nginx.md sections 1-4), kept as plain as
// possible: no cycle, no atomics, no sharing with the code under test.
type ngxModel struct {
	primary, backup []*ngxPeer
	single          bool
	// per request
	tried     map[*ngxPeer]bool
	onBackup  bool
	tries     int
	triesLeft int
}

type ngxPeer struct {
	addr                     string
	w, ew, cw                int64
	maxFails                 int64
	failTimeout              int64
	fails, accessed, checked int64
	backup, down             bool
}

func (m *ngxModel) add(addr string, w, mf int, ft int64, backup, down bool) {
	p := &ngxPeer{addr: addr, w: int64(w), ew: int64(w), maxFails: int64(mf), failTimeout: ft, backup: backup, down: down}
	if backup {
		m.backup = append(m.backup, p)
	} else {
		m.primary = append(m.primary, p)
	}
	m.single = len(m.primary) == 1 && len(m.backup) == 0
}

func (m *ngxModel) all() []*ngxPeer { return append(append([]*ngxPeer{}, m.primary...), m.backup...) }

func (m *ngxModel) begin() {
	m.tried = map[*ngxPeer]bool{}
	m.onBackup = false
	m.tries = 0
	for _, p := range m.all() {
		if !p.down {
			m.tries++
		}
	}
	m.triesLeft = m.tries
}

// exhausted reports whether nginx would stop retrying: ngx_http_upstream_next
// checks tries before it asks for another peer, never before the first.
func (m *ngxModel) exhausted() bool { return m.triesLeft <= 0 && m.triesLeft != m.tries }

func (m *ngxModel) pick(now int64) *ngxPeer { return m.pickWith(now, m.getPeer) }

// pickWith is ngx_http_upstream_get_round_robin_peer around a selector:
// the single-server shortcut, the primaries, then the backups, the tried
// set and the tries. The models of the other nginx balancers reuse it with
// their own selector.
func (m *ngxModel) pickWith(now int64, getPeer func([]*ngxPeer, int64) *ngxPeer) *ngxPeer {
	if m.exhausted() {
		return nil
	}
	if m.single {
		p := m.primary[0]
		if p.down {
			return nil
		}
		m.triesLeft--
		return p
	}
	var p *ngxPeer
	if !m.onBackup {
		p = getPeer(m.primary, now)
		if p == nil && len(m.backup) > 0 {
			m.onBackup = true
			m.tried = map[*ngxPeer]bool{}
		}
	}
	if p == nil && m.onBackup {
		p = getPeer(m.backup, now)
	}
	if p != nil {
		m.tried[p] = true
		m.triesLeft--
	}
	return p
}

func (m *ngxModel) getPeer(peers []*ngxPeer, now int64) *ngxPeer {
	var best *ngxPeer
	var total int64
	for _, p := range peers {
		if m.tried[p] || p.down {
			continue
		}
		if p.maxFails != 0 && p.fails >= p.maxFails && now-p.checked <= p.failTimeout {
			continue
		}
		p.cw += p.ew
		total += p.ew
		if p.ew < p.w {
			p.ew++
		}
		if best == nil || p.cw > best.cw {
			best = p
		}
	}
	if best == nil {
		return nil
	}
	best.cw -= total
	if now-best.checked > best.failTimeout {
		best.checked = now
	}
	return best
}

func (m *ngxModel) free(p *ngxPeer, failed bool, now int64) {
	m.freeWith(p, failed, now, func(p *ngxPeer) {
		if p.maxFails != 0 {
			p.ew -= p.w / p.maxFails
		}
		if p.ew < 0 {
			p.ew = 0
		}
	})
}

// freeWith is ngx_http_upstream_free_round_robin_peer around the failure
// penalty, which is all that differs between nginx versions: nginx 1.22.1
// lowers the effective weight (ngxModel.free), nginx 1.2.0 the current one
// (classicModel.free).
func (m *ngxModel) freeWith(p *ngxPeer, failed bool, now int64, penalize func(*ngxPeer)) {
	if m.single {
		p.fails = 0
		return
	}
	if failed {
		p.fails++
		p.accessed, p.checked = now, now
		penalize(p)
		return
	}
	if p.accessed < p.checked {
		p.fails = 0
	}
}
