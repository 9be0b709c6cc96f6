package retrybudget_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
)

// A budget with no ratio and a reserve of one retry a second over 10 s
// allows 10 retries in the window: the first request, whose every attempt
// fails, retries 10 times over its 20 peers, and the next gets none. The
// budget is the Budget of the requests' balancer.Attempts.
func ExampleBudget() {
	now := func() time.Time { return time.Unix(0, 0) } // a clock that stands still
	budget, err := retrybudget.New(0, 1, 10*time.Second, retrybudget.WithClock(now))
	if err != nil {
		panic(err)
	}
	var peers []*balancer.Peer
	for i := range 20 {
		peers = append(peers, balancer.NewPeer(fmt.Sprintf("10.0.0.%d:80", i+1), balancer.MaxFails(0)))
	}
	picker, err := balancer.NewRoundRobin(peers)
	if err != nil {
		panic(err)
	}
	err503 := errors.New("503 Service Unavailable")
	for range 2 {
		attempts := 0
		loop := balancer.Attempts{Picker: picker, Budget: budget}
		err := loop.Do(context.Background(), func(ctx context.Context, p *balancer.Peer) error {
			attempts++
			return err503
		})
		fmt.Println(attempts, errors.Is(err, balancer.ErrRetryBudget), errors.Is(err, err503))
	}
	fmt.Printf("%+v\n", budget.Stats())
	// Output:
	// 11 true true
	// 1 true true
	// {Deposits:2 Retries:10 Refused:2}
}
