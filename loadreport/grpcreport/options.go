package grpcreport

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
)

// ErrInvalidOption: an argument to New or RegisterOOB is out of range.
var ErrInvalidOption = errors.New("grpcreport: invalid option")

// Option configures New.
type Option func(*Reporter) error

// maxCode is the largest status code gRPC defines (Unauthenticated).
const maxCode = codes.Unauthenticated

// defaultErrorCodes are the codes counted as errors by default: those
// that gRPC's HTTP mapping (grpc-gateway, Google's API design guide) sends
// as a 5xx, so that the default matches loadreport.Middleware's (a
// status of 500 and above).
var defaultErrorCodes = []codes.Code{
	codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented,
	codes.Internal, codes.Unavailable, codes.DataLoss,
}

// WithErrorCodes sets the status codes that count as errors (eps), in
// place of the default: UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED,
// INTERNAL, UNAVAILABLE and DATA_LOSS, the codes gRPC's HTTP mapping
// sends as a 5xx. A handler that panics always counts as an error. OK
// and codes gRPC does not define are refused.
func WithErrorCodes(cs ...codes.Code) Option {
	return func(r *Reporter) error {
		r.isError = [maxCode + 1]bool{}
		for _, c := range cs {
			if c == codes.OK || c > maxCode {
				return fmt.Errorf("%w: WithErrorCodes(%v): not an error code", ErrInvalidOption, c)
			}
			r.isError[c] = true
		}
		return nil
	}
}

// WithSkip makes the interceptors leave the methods for which skip
// returns true alone: not counted, no report forced. skip gets the full
// method name, "/package.Service/Method". Long-lived streams (a health
// Watch, a subscription) are the usual case: counted, each would stay in
// flight for its life and enter the latency estimate with it. ORCA's own
// out-of-band stream is always skipped.
func WithSkip(skip func(fullMethod string) bool) Option {
	return func(r *Reporter) error {
		if skip == nil {
			return fmt.Errorf("%w: WithSkip(nil)", ErrInvalidOption)
		}
		r.skip = skip
		return nil
	}
}

// minOOBInterval is the shortest interval grpc-go's ORCA service sends
// out-of-band reports at: it raises a smaller ServiceOptions.
// MinReportingInterval to it (only a grpc-internal test hook lowers it).
const minOOBInterval = 30 * time.Second
