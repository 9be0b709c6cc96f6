package upstream

import (
	"errors"
	"fmt"
)

// Errors wrapped by a ParseError; test for them with errors.Is. Weights
// whose sum passes balancer.MaxWeightSum wrap balancer.ErrInvalidConfig.
var (
	// ErrSyntax is wrapped for text that is not well-formed: a missing ";"
	// or "}", a token out of place, an unterminated quote, an unknown
	// directive inside an upstream block, a directive with the wrong number
	// of arguments.
	ErrSyntax = errors.New("upstream: syntax error")

	// ErrInvalidParam is wrapped for a bad parameter of a server or of a
	// balancing method: an unknown name, a bad number or time, a weight of
	// 0, a parameter the block's balancing method does not allow.
	ErrInvalidParam = errors.New("upstream: invalid parameter")

	// ErrInvalidAddr is wrapped for a server address nginx rejects: an
	// invalid port (0, above 65535, not a number), a URI or scheme, a bad
	// IPv6 address, no host, a bad unix socket path.
	ErrInvalidAddr = errors.New("upstream: invalid server address")

	// ErrNoServers is wrapped for a block with no primary server: empty,
	// or with backup servers only (nginx rejects both).
	ErrNoServers = errors.New("upstream: no servers")

	// ErrNoUpstream is wrapped when the text holds no upstream block, or
	// none by the name asked for.
	ErrNoUpstream = errors.New("upstream: no such upstream block")

	// ErrManyUpstreams is wrapped when the text holds several upstream
	// blocks and no name says which one to use.
	ErrManyUpstreams = errors.New("upstream: several upstream blocks")
)

// ParseError reports where and why a block could not be parsed.
//
// The zero value reports ":0: " and wraps nothing. A ParseError is not
// modified after it is returned, so it is safe for concurrent reads.
type ParseError struct {
	File string
	Line int // 1-based; one past the last line for an unexpected end of file
	Msg  string
	Err  error // the sentinel this error wraps
}

// Error returns "FILE:LINE: message".
func (e *ParseError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// Unwrap returns the sentinel error e wraps.
func (e *ParseError) Unwrap() error { return e.Err }
