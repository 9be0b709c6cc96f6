package balancer

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// No picker but ReportedWRR weighs a load report: two pickers built alike, fed the
// same outcomes, one with a Load on every report and one without, pick
// the same sequence. The outcomes mix successes, failures and abandoned
// attempts with latencies drawn from a seeded source, so that the
// latency-aware pickers' state moves too.
func TestServerLoad_ignoredByEveryPicker(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		if pc.name == reportedWRRSpec.name {
			t.Skip("weighs reports: reported_wrr_test.go")
		}
		seq := func(withLoad bool) string {
			clk := newFakeClock()
			peers := makePeers(5, letter, func(i int) []PeerOption { return []PeerOption{Weight(i + 1), MaxFails(0)} })
			p, err := pc.new(peers, optsFor(pc, clk)...)
			require.NoError(t, err)
			src := rand.New(rand.NewPCG(7, 8))
			var out []byte
			for range 300 {
				q := mustPick(t, p, nil)
				out = append(out, q.Addr()...)
				o := Outcome{Latency: time.Duration(src.IntN(50)+1) * time.Millisecond}
				switch src.IntN(10) {
				case 0:
					o.Failed = true
				case 1:
					o.Abandoned = true
				}
				l := ServerLoad{Utilization: src.Float64() * 2, RPS: src.Float64() * 1000, EPS: src.Float64() * 10, InFlight: float64(src.IntN(100)), HasInFlight: true}
				if withLoad {
					o.Load = &l
				}
				require.NoError(t, p.Done(q, o))
				clk.add(time.Millisecond)
			}
			return string(out)
		}
		assert.Equal(t, seq(false), seq(true))
	})
}

// Pick+Done allocates nothing, with a Load or without: the report is the
// caller's and the picker keeps no pointer to it.
func TestServerLoad_pickDoneAllocs(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		peers := makePeers(10, numbered, func(i int) []PeerOption { return []PeerOption{Weight(i%10 + 1), MaxFails(0)} })
		p, err := pc.new(peers)
		require.NoError(t, err)
		l := &ServerLoad{Utilization: 0.5, RPS: 100, EPS: 1, InFlight: 3, HasInFlight: true}
		for _, tt := range []struct {
			name string
			load *ServerLoad
		}{{"without Load", nil}, {"with Load", l}} {
			allocs := testing.AllocsPerRun(1000, func() {
				peer, _ := p.Pick(nil)
				_ = p.Done(peer, Outcome{Latency: time.Millisecond, Load: tt.load})
			})
			assert.Zero(t, allocs, "Pick+Done %s", tt.name)
		}
	})
}
