package balancer

import (
	"errors"
	"time"
)

// Prober sends probes on behalf of a picker that balances by them
// (Prequal): it asks one peer's server for its load, out of band, and hands
// the answer back. The integrations provide one per transport (an HTTP
// prober in balancerhttp, a gRPC one in grpcbalancer); the simulator's
// probes are events on its virtual clock.
//
// A Prober is safe for concurrent use: Probe is called from Pick, on the
// caller's goroutine.
type Prober interface {
	// Probe starts probing p and returns at once; it never blocks and
	// allocates nothing the caller pays for. Later, from any goroutine, it
	// calls to.Answer(p, a) at most once for this call: with the server's
	// answer, or with a.Failed set when none came (an error, a timeout, a
	// server that does not answer probes). A prober that cannot send now
	// (its queue is full, it is closed) drops the probe without an answer.
	Probe(p *Peer, to ProbeReceiver)
}

// ProbeReceiver takes probe answers: a picker that balances by probes.
type ProbeReceiver interface {
	// Answer records a's answer to a probe of p. It returns ErrUnknownPeer
	// for a peer the receiver does not hold and ErrInvalidProbe for an
	// answer out of range (see ProbeAnswer), and then changes nothing.
	Answer(p *Peer, a ProbeAnswer) error
}

// ProbeAnswer is what one probe of a peer found.
type ProbeAnswer struct {
	// InFlight is the server's requests in flight, from every client,
	// when it answered. At least 0 and at most MaxProbeInFlight.
	InFlight float64

	// Latency is the server's estimate of how long a request arriving at
	// that load takes it, not counting the network. At least 0 and at
	// most MaxProbeLatency.
	Latency time.Duration

	// RoundTrip is the probe's round trip as the client measured it, from
	// sending to the answer: the network distance to the peer, which the
	// server's estimate does not include. At least 0 and at most
	// MaxProbeLatency.
	RoundTrip time.Duration

	// Failed reports that no answer came; the other fields are then
	// ignored.
	Failed bool

	// Err is why a Failed answer failed, if the Prober knows (an HTTP
	// status, a transport error, a timeout), naming the peer; nil
	// otherwise. Prequal hands it to EventPeerBlind.
	Err error
}

// Bounds of a ProbeAnswer: larger values are absurd (a server's count or
// clock gone wrong) and are refused with ErrInvalidProbe. A Prober fills
// the answers, so the bounds are exported; MaxProbeLatency also bounds
// PrequalSettings.MaxAge.
const (
	MaxProbeInFlight = 1 << 20
	MaxProbeLatency  = time.Hour
)

// ErrInvalidProbe is returned by Answer for a probe answer whose InFlight
// is NaN, infinite, negative or above MaxProbeInFlight, or whose Latency or
// RoundTrip is negative or above MaxProbeLatency.
var ErrInvalidProbe = errors.New("balancer: invalid probe answer")
