package balancer_test

import (
	"fmt"
	"time"

	"github.com/lbgo/balancer"
)

// A TCP proxy keeps each session open for as long as its client does. It
// reports the established connection with Connected, as nginx's stream
// module does, and the session's end with Done: a peer whose probe
// connects is readmitted at once, so the sessions that follow go to it
// while the probe is still open, instead of to the backup.
func ExampleConnector() {
	now := time.Unix(0, 0)
	clock := balancer.WithClock(func() time.Time { return now })
	db := balancer.NewPeer("10.0.0.1:5432", balancer.MaxFails(1), balancer.FailTimeout(10*time.Second))
	spare := balancer.NewPeer("10.0.0.2:5432", balancer.Backup())
	var lb balancer.Balancer
	lb, _ = balancer.NewSmoothWRR([]*balancer.Peer{db, spare}, clock)

	// The connection to db is refused: out for fail_timeout.
	peer, _ := lb.Pick(nil)
	_ = lb.Done(peer, balancer.Outcome{Failed: true})

	now = now.Add(11 * time.Second)
	var open []*balancer.Peer
	for range 4 {
		peer, _ := lb.Pick(nil)
		// ... the connection to peer is established ...
		_ = lb.(balancer.Connector).Connected(peer)
		open = append(open, peer)
	}
	fmt.Println("sessions on", addrs(open))
	fmt.Println("db in flight:", db.InFlight(), "failures:", db.State().Fails)

	for _, peer := range open { // each session's end
		_ = lb.Done(peer, balancer.Outcome{})
	}
	// Output:
	// sessions on [10.0.0.1:5432 10.0.0.1:5432 10.0.0.1:5432 10.0.0.1:5432]
	// db in flight: 4 failures: 0
}
