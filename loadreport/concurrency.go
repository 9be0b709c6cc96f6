package loadreport

import "fmt"

// maxConcurrency bounds WithConcurrency's n.
const maxConcurrency = 1 << 20

// WithConcurrency tells the Tracker that the server serves at most n
// requests at once (its workers, or its cores for CPU-bound work), and
// makes it report application_utilization as the mean number of requests
// in service over the window divided by n: RPS × mean latency / n, by
// Little's law, from the same window. Without a utilization a report
// gives weighted round robin (gRFC A58, ReportedWRR) nothing to weigh,
// and SetCPUUtilization needs a CPU sampler the server may not have; this
// is the utilization a server of n workers has when its handlers spend
// their time serving. It passes 1 when requests wait inside the handler
// for a worker, as an overloaded server's should. It replaces
// SetApplicationUtilization's value; it cannot be combined with
// WithUtilization. n is from 1 to 2^20.
func WithConcurrency(n int) Option {
	return func(s *settings) error {
		if n < 1 || n > maxConcurrency {
			return fmt.Errorf("%w: WithConcurrency(%d), want 1 to %d", ErrInvalidOption, n, maxConcurrency)
		}
		s.concurrency = n
		s.trackerOption("WithConcurrency")
		return nil
	}
}

// busy is the utilization WithConcurrency reports: rps requests a second
// of latencyMs each keep rps × latencyMs / 1000 in service on average
// (Little's law), of n.
func busy(rps, latencyMs float64, n int) float64 {
	return rps * latencyMs / 1000 / float64(n)
}
