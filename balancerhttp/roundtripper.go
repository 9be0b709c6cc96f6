package balancerhttp

import (
	"errors"
	"fmt"
	"net/http"
)

// ErrBadRoundTripper is the error of an attempt, probe or health check
// whose http.RoundTripper broke its contract: it returned a nil response
// with a nil error, or a nil Body with a Content-Length above 0 (a nil
// Body otherwise stands for an empty one, http.NoBody, as http.Client
// takes it). A Transport or Proxy reports such an attempt Abandoned (the
// peer did nothing wrong) and retries no further: the next peer would go
// through the same RoundTripper. A RoundTripper that panics in a Prober's
// or HealthChecker's goroutine, which no caller could recover, fails that
// probe or check with this error; one that panics in a Transport's or
// Proxy's attempt panics on, as under http.Client, once the attempt is
// reported.
var ErrBadRoundTripper = errors.New("balancerhttp: the RoundTripper broke its contract")

// roundTrip is rt.RoundTrip(req) held to http.RoundTripper's contract, as
// http.Client holds it (net/http's send): a response with an error is
// dropped, a nil response with no error is an error, and a nil Body is
// http.NoBody unless the response claims a body (not to a HEAD), which is
// an error.
func roundTrip(rt http.RoundTripper, req *http.Request) (*http.Response, error) {
	resp, err := rt.RoundTrip(req)
	switch {
	case err != nil:
		return nil, err
	case resp == nil:
		return nil, fmt.Errorf("%w: %T returned a nil *http.Response and a nil error", ErrBadRoundTripper, rt)
	case resp.Body == nil && resp.ContentLength > 0 && req.Method != http.MethodHead:
		return nil, fmt.Errorf("%w: %T returned a response of Content-Length %d with a nil Body", ErrBadRoundTripper, rt, resp.ContentLength)
	case resp.Body == nil:
		resp.Body = http.NoBody
	}
	return resp, nil
}

// attemptRoundTrip is roundTrip for one attempt of a Transport or Proxy:
// if rt panics (or calls runtime.Goexit), unwound reports the attempt
// while the panic goes on, unrecovered, with its own stack, so that no
// peer keeps the attempt in flight.
func attemptRoundTrip(rt http.RoundTripper, req *http.Request, unwound func()) (*http.Response, error) {
	returned := false
	defer func() {
		if !returned {
			unwound()
		}
	}()
	resp, err := roundTrip(rt, req)
	returned = true
	return resp, err
}

// recoveredRoundTrip is roundTrip on a goroutine of the library's own (a
// probe's, a health check's), where a panic would end the process: rt's
// panic is an error wrapping ErrBadRoundTripper, naming its value.
func recoveredRoundTrip(rt http.RoundTripper, req *http.Request) (resp *http.Response, err error) {
	defer func() {
		if v := recover(); v != nil {
			resp, err = nil, fmt.Errorf("%w: %T panicked: %v", ErrBadRoundTripper, rt, v)
		}
	}()
	return roundTrip(rt, req)
}
